"""The commitment a timed reply makes to an output: per element a keyed NONLINEAR function of
the value, summed. agents/verify/checksums.py applies it to output trees.

Why nonlinear and keyed per element: the old checksum was a weighted sum under an outer
product of weights, v^T X w. For X = A B that is (v^T A)(B w), computable in O(N^2) without the
product: a worker replied with it and formed the product only when an output was fetched.
Here element i of a leaf enters as w_i sin(s_i x_i + b_i), with w_i in [0, 1), s_i = c (1 +
3 w_i) and b_i in [0, 2 pi) drawn from a key that arrives with the request. No identity moves
a sum of sines of per-element affine maps onto the inputs of the step that made x: each term
needs its own x_i to within about 1 / s_i, and c (the parent's, 1 / the reference output's
RMS) makes s_i x_i span O(1)-O(10) radians, so that is every element to within a few times
its RMS over 1e3-1e4. Even the linearised term (sin near its zero crossings) weighs element i
by w_i s_i cos(b_i), a matrix of full rank: moving it onto A and B costs a product again.
Integers and booleans get an exact keyed mix (xor, odd multiply, shifts) summed in int64.

The keys per element: per leaf position a table of two keys for each of WIDTH columns; per
row of WIDTH elements a weight offset, and per call and row a phase offset. Element i of row
r of call j takes w = frac(T0[i] + o0[r]) and b = 2 pi (T1[i] + o1[j, r]). Drawing keys per
element costs about 5 ns each on a CPU (more than the sine); the table and offsets cost a few
numbers per WIDTH elements, and the keys still differ element by element (frac of a sum is no
product: the old outer product's rank one is gone). The K calls of one request share w and s
and differ in b: acceptable only because the function is nonlinear (a linear checksum with
shared weights would let sums over calls or over a factor's rows be taken first; here every
term needs its own call's element). Everything is drawn from a generator seeded by the
request's key and the leaf position, in an order that does not depend on how the work is
split, so the reference's process recomputes any one call's commitment from its bytes (an
opening) to float rounding.

Non-finite elements commit to sentinels outside [-1, 1] (NaN 2, +inf 3, -inf -3), so an output
must be finite exactly where the reference's is. Large leaves go in pieces of PIECE elements
(bounded extra memory); small leaves of the K calls of a request go in one pass.
"""

from __future__ import annotations

import math

import torch

WIDTH = 4096
PIECE = 1 << 18
"""Elements per piece of work on the CPU: a few temporaries of this size stay in its cache."""
GPU_PIECE = 1 << 22
"""On a GPU: a piece of 2^18 elements is a few microseconds of work behind a dozen kernel
launches, so a 2^26-element output took 256 Python rounds, about 40 ms, whose spread (the
overhead request's interquartile range) hid any call shorter than it (H100, 08_gelu:
outside 39.5 ms against 0.72 ms by CUDA events). 2^22 keeps each temporary at 16 MB."""
BAND_SAMPLE = 1 << 10
_TWO_PI = 2.0 * math.pi
_MIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9)
_INT_MULTIPLIER = -7046029254386353131  # 0x9E3779B97F4A7C15 as a signed int64
_INT_KEY = 1 << 62


def piece_elements(device: torch.device) -> int:
    """Elements per piece of work where the values live (PIECE, or GPU_PIECE on a GPU)."""
    return GPU_PIECE if device.type == "cuda" else PIECE


def generator_seed(key: int, position: int) -> int:
    """The seed of one leaf position's draws under a request's key."""
    return (key * _MIX[0] + (position + 1) * _MIX[1]) % (1 << 63)


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype in (torch.float64, torch.complex128) else torch.float32


def _layout(numel: int) -> tuple[int, int]:
    """(width, rows): rows of at most WIDTH elements, as even as can be (little padding)."""
    rows = max(-(-numel // WIDTH), 1)
    return max(-(-numel // rows), 1), rows


def _draw(
    key: int, position: int, calls: int, numel: int, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(table (2, width), weight offsets (rows, 1), phase offsets (calls, rows, 1)), always
    drawn in this order. Floats: key 0 gives the weight w (a fraction) and the frequency
    s = c (1 + 3 w); key 1, times 2 pi, the phase b (the sine's period makes its fraction
    free). Integers: two int64 keys of the mix."""
    width, rows = _layout(numel)
    generator = torch.Generator(device=device).manual_seed(generator_seed(key, position))
    if dtype == torch.int64:
        shapes = ((2, width), (rows, 1), (calls, rows, 1))
        return tuple(  # type: ignore[return-value]
            torch.randint(-_INT_KEY, _INT_KEY, shape, generator=generator, device=device)
            for shape in shapes
        )
    table = torch.rand((2, width), generator=generator, device=device, dtype=dtype)
    weights = torch.rand((rows, 1), generator=generator, device=device, dtype=dtype)
    phases = torch.rand((calls, rows, 1), generator=generator, device=device, dtype=dtype)
    table[1] *= _TWO_PI
    return table, weights, phases.mul_(_TWO_PI)


def _keys(
    table: torch.Tensor, weights: torch.Tensor, phases: torch.Tensor, count: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Over these rows, the first `count` elements' keys: the weight key (1, count), shared
    by the calls of a request, and the phase key (block, count), each call's own."""
    first = (table[0] + weights).reshape(1, -1)[:, :count]
    second = (table[1] + phases).reshape(phases.shape[0], -1)[:, :count]
    return (first.frac() if first.is_floating_point() else first), second


def commit(
    rows: list[torch.Tensor], key: int, position: int, calls: int, first: int, scale: float
) -> torch.Tensor:
    """The commitments of len(rows) calls' leaves at one position (flat, alike in size and
    dtype), calls first, first+1, ... of a request of `calls`: a float64 or int64 tensor.
    One wait for the device per position: only a non-finite total (an element NaN or
    infinite) sends the position through the exact path, with its sentinels."""
    flat = rows[0]
    if not flat.is_floating_point():
        return _pieces(rows, key, position, calls, first, _int_piece)
    fast = _pieces(rows, key, position, calls, first, lambda v, w, b: _float_piece(v, w, b, scale))
    if bool(torch.isfinite(fast).all()):
        return fast
    return _pieces(rows, key, position, calls, first, lambda v, w, b: _float_exact(v, w, b, scale))


def _pieces(rows, key, position, calls, first, piece_sum) -> torch.Tensor:
    """`piece_sum(values, keys)` over every piece of the rows, summed per call."""
    flat = rows[0]
    numel = flat.numel()
    integer = not flat.is_floating_point()
    dtype = torch.int64 if integer else work_dtype(flat.dtype)
    table, weights, phases = _draw(key, position, calls, numel, flat.device, dtype)
    width, count = _layout(numel)
    piece = piece_elements(flat.device)
    per_block = max(piece // max(numel, 1), 1)
    piece_rows = max(piece // width, 1)
    totals = []
    for start in range(0, len(rows), per_block):
        block = rows[start : start + per_block]
        values = torch.stack(block) if len(block) > 1 else block[0].reshape(1, -1)
        values = values.to(dtype)
        own = phases[first + start : first + start + len(block)]
        total = torch.zeros(len(block), dtype=torch.int64 if integer else torch.float64)
        total = total.to(flat.device)
        for row in range(0, count, piece_rows):
            low, high = row * width, min(numel, (row + piece_rows) * width)
            lines = slice(row, row + piece_rows)
            keys = _keys(table, weights[lines], own[:, lines], high - low)
            total = total + piece_sum(values[:, low:high], *keys)
        totals.append(total)
    return torch.cat(totals)


def _float_piece(values, weight, phase0, scale: float) -> torch.Tensor:
    phase = torch.addcmul(phase0, values, torch.add(scale, weight, alpha=3.0 * scale))
    return (phase.sin_() @ weight[0]).to(torch.float64)


def _float_exact(values, weight, phase0, scale: float) -> torch.Tensor:
    """The same in float64, with sentinels where an element (or its phase) is not finite."""
    weight, values64 = weight.to(torch.float64), values.to(torch.float64)
    phase = torch.addcmul(
        phase0.to(torch.float64), values64, torch.add(scale, weight, alpha=3.0 * scale)
    )
    sentinel = torch.where(
        torch.isnan(values64),
        2.0,
        torch.where(values64 == math.inf, 3.0, torch.where(values64 == -math.inf, -3.0, 4.0)),
    )
    term = torch.where(torch.isfinite(phase), torch.sin(phase), sentinel)
    return (term * weight).sum(dim=1)


def _int_piece(values: torch.Tensor, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    mixed = torch.bitwise_xor(values, first).mul_(torch.bitwise_or(second, 1))
    mixed = torch.bitwise_xor(mixed, mixed >> 31).mul_(_INT_MULTIPLIER)
    return torch.bitwise_xor(mixed, mixed >> 29).sum(dim=1)


def band(
    rows: list[torch.Tensor],
    key: int,
    position: int,
    calls: int,
    first: int,
    scale: float,
    tolerance: float,
) -> torch.Tensor:
    """Per call (the reference's outputs): the standard deviation of the commitment's change
    when every element moves by allclose's allowance a = tol (1 + |x|) with a random sign:
    sqrt(sum w^2 (s^2 a^2 cos^2(phase) + (s^2 a^2 / 2)^2)), the second term the sine's
    curvature where the cosine vanishes. Non-finite elements must match exactly: no band.
    Over 4 BAND_SAMPLE elements, the sum is estimated from BAND_SAMPLE drawn at random (a sum of
    positive terms: a few percent off, nothing to a six-sigma yardstick) at a fraction of
    the commitment's own cost."""
    numel = rows[0].numel()
    if numel > 4 * BAND_SAMPLE:
        variance = _sampled_band(rows, key, position, calls, first, scale, tolerance)
    else:
        variance = _pieces(
            rows,
            key,
            position,
            calls,
            first,
            lambda v, w, b: _band_piece(v, w, b, scale, tolerance),
        )
    return variance.clamp_min(0.0).sqrt()


def _sampled_band(rows, key, position, calls, first, scale, tolerance) -> torch.Tensor:
    flat = rows[0]
    numel, device = flat.numel(), flat.device
    dtype = work_dtype(flat.dtype)
    table, weights, phases = _draw(key, position, calls, numel, device, dtype)
    width, _ = _layout(numel)
    generator = torch.Generator(device=device).manual_seed(generator_seed(key, position + 1))
    picks = torch.randint(0, numel, (BAND_SAMPLE,), generator=generator, device=device)
    column, line = picks % width, picks // width
    weight = (table[0][column] + weights[line, 0]).frac().unsqueeze(0)
    per_block = max(piece_elements(device) // numel, 1)
    totals = []
    for start in range(0, len(rows), per_block):
        block = rows[start : start + per_block]
        values = torch.stack(block)[:, picks].to(dtype)
        own = phases[first + start : first + start + len(block), :, 0]
        phase0 = table[1][column].unsqueeze(0) + own[:, line]
        totals.append(_band_piece(values, weight, phase0, scale, tolerance))
    return torch.cat(totals) * (numel / BAND_SAMPLE)


def _band_piece(values, weight, phase0, scale: float, tolerance: float) -> torch.Tensor:
    """In the work dtype (the band is a yardstick, not a value compared to rounding); every
    term is positive, so float32 sums it well."""
    allowance = torch.nan_to_num(values.abs().mul_(tolerance).add_(tolerance), 0.0, 0.0, 0.0)
    frequency = torch.add(scale, weight, alpha=3.0 * scale)
    phase = torch.nan_to_num(torch.addcmul(phase0, values, frequency), 0.0, 0.0, 0.0)
    stretch = (frequency * allowance).square_()
    slope = phase.cos_().square_().mul_(stretch)
    slope.addcmul_(stretch, stretch, value=0.25)
    return (slope @ weight[0].square()).to(torch.float64)
