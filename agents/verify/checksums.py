"""Checksums that prove an output complete: weighted sums under weights the worker learns only
with the request that asks for them (agents/verify/clock.py times requests that end in them).

Why weights from the request: a sum under weights known in advance could be computed from a
partial or precomputed output; drawn from a seed that arrives with the request, each needs
the whole output, so a reply cannot come before every output it covers exists. Both sides
draw the same weights, so the parent compares the candidate's sums with the reference's,
within a band (`checksum_band`, `call_bands`) of what allclose's allowance on every element
would move them.
"""

from __future__ import annotations

from typing import Any

import torch

from agents.verify import values
from agents.verify.compare import STRICT_TOLERANCE
from agents.verify.side import flatten

CHECKSUM_WIDTH = 4096
STACK_LIMIT = 1 << 16
"""A leaf of at most this many elements is summed for all K calls of a timed request at once
(one product): summed one by one, K small outputs cost K rounds of the dispatcher, which
would swamp the calls being timed."""
_STACK_SALT = 104_729  # stacked weights never share a seed with a per-leaf sum's

Pending = list[tuple[list[dict[str, Any]], torch.Tensor]]


def _flat_real(leaf: torch.Tensor) -> torch.Tensor:
    flat = leaf.detach().reshape(-1)
    return torch.view_as_real(flat).reshape(-1) if flat.is_complex() else flat


def checksum(value: Any, seed: int) -> list[Any]:
    """Per leaf, one number that needs the whole output: a weighted sum whose weights are
    drawn from `seed`, which the worker learns only with the request that makes it compute.
    The weights are an outer product (one random vector along rows of CHECKSUM_WIDTH, one
    across them), so the sum costs one read of the output. Integers and booleans are summed
    exactly; a scalar leaf is sent as it is."""
    pending: Pending = []
    sums = [_leaf_entry(leaf, seed + 7919 * i, pending) for i, leaf in enumerate(flatten(value))]
    _read_sums(pending)
    return sums


def call_checksums(outputs: list[Any], seed: int) -> list[Any]:
    """`checksum` of a timed request's K outputs: one entry per leaf of each call, in
    `flatten(outputs)` order. A leaf position whose K leaves are small tensors alike is summed
    for all calls at once, each call's leaf under the same weights (drawn for that position):
    a call that replays another's output still misses, since their inputs differ."""
    return _call_sums(outputs, seed, band=False)


def call_bands(outputs: list[Any], seed: int) -> list[float | None]:
    """`checksum_band` under the weights `call_checksums` uses, entry for entry."""
    return _call_sums(outputs, seed, band=True)


def _call_sums(outputs: list[Any], seed: int, band: bool) -> list[Any]:
    per_call = [flatten(output) for output in outputs]
    width = len(per_call[0]) if per_call else 0
    if any(len(leaves) != width for leaves in per_call):  # structures differ: leaf by leaf
        return checksum_band(outputs, seed) if band else checksum(outputs, seed)
    entries: list[Any] = [None] * (len(outputs) * width)
    pending: Pending = []
    for position in range(width):
        column = [leaves[position] for leaves in per_call]
        if _stackable(column):
            stacked = torch.stack([_flat_real(leaf) for leaf in column])
            position_seed = seed + 7919 * position + _STACK_SALT
            if band:
                sigmas = _stacked_band(stacked, column[0].dtype, position_seed)
                for call, sigma in enumerate(sigmas):
                    entries[call * width + position] = sigma
                continue
            kind = {"kind": "tensor", "numel": stacked.shape[1], "dtype": str(column[0].dtype)}
            made = [dict(kind) for _ in column]
            for call, entry in enumerate(made):
                entries[call * width + position] = entry
            pending.append((made, _stacked_sums(stacked, position_seed)))
            continue
        for call, leaf in enumerate(column):
            index = call * width + position
            leaf_seed = seed + 7919 * index
            entries[index] = (
                _leaf_band(leaf, leaf_seed) if band else _leaf_entry(leaf, leaf_seed, pending)
            )
    _read_sums(pending)
    return entries


def _stackable(column: list[Any]) -> bool:
    first = column[0]
    if not _plain(first) or first.numel() > STACK_LIMIT:
        return False
    return all(
        _plain(leaf)
        and leaf.dtype == first.dtype
        and leaf.numel() == first.numel()
        and leaf.device == first.device
        for leaf in column
    )


def _plain(leaf: Any) -> bool:
    return (
        (type(leaf) is torch.Tensor or type(leaf) is torch.nn.Parameter)
        and not leaf.is_meta
        and leaf.layout == torch.strided
    )


def _stacked_sums(stacked: torch.Tensor, seed: int) -> torch.Tensor:
    """Per row (call) of K x n: the sum of its elements under one weight vector of n."""
    generator = torch.Generator(device=stacked.device).manual_seed(seed)
    n = stacked.shape[1]
    if not stacked.is_floating_point():
        weights = torch.randint(-1000, 1000, (n,), generator=generator, device=stacked.device)
        return (stacked.to(torch.int64) * weights).sum(dim=1)
    work = torch.float64 if stacked.dtype == torch.float64 else torch.float32
    weights = torch.randn(n, generator=generator, device=stacked.device, dtype=work)
    return (stacked.to(work) @ weights).to(torch.float64)


def _stacked_band(stacked: torch.Tensor, dtype: torch.dtype, seed: int) -> list[float | None]:
    """Per row: the standard deviation of `_stacked_sums` when every element moves by
    allclose's full allowance with a random sign; None for integers (compared exactly)."""
    if not (dtype.is_floating_point or dtype.is_complex):
        return [None] * stacked.shape[0]
    generator = torch.Generator(device=stacked.device).manual_seed(seed)
    work = torch.float64 if stacked.dtype == torch.float64 else torch.float32
    weights = torch.randn(stacked.shape[1], generator=generator, device=stacked.device, dtype=work)
    allowance = _allowance(stacked, STRICT_TOLERANCE.get(dtype, 1e-4))
    return (allowance @ weights.to(torch.float64).square()).clamp_min(0.0).sqrt().tolist()


def _allowance(flat: torch.Tensor, tolerance: float) -> torch.Tensor:
    allowance = torch.nan_to_num(flat.to(torch.float64), nan=0.0, posinf=0.0, neginf=0.0)
    return allowance.abs_().mul_(tolerance).add_(tolerance).square_()


def _leaf_entry(leaf: Any, leaf_seed: int, pending: Pending) -> dict[str, Any]:
    """One leaf's entry; a tensor's sum is left in `pending` for `_read_sums`."""
    if not isinstance(leaf, torch.Tensor):
        return {"scalar": values.pack(leaf)[0]}
    if type(leaf) is not torch.Tensor and type(leaf) is not torch.nn.Parameter:
        return {"kind": "subclass"}
    if leaf.is_meta or leaf.layout != torch.strided:
        return {"kind": "not strided"}
    flat = _flat_real(leaf)
    entry: dict[str, Any] = {"kind": "tensor", "numel": flat.numel(), "dtype": str(leaf.dtype)}
    if flat.is_floating_point():
        pending.append(([entry], _weighted_float(flat, leaf_seed, square=False).reshape(1)))
    else:
        pending.append(([entry], _weighted_int(flat, leaf_seed).reshape(1)))
    return entry


def _read_sums(pending: Pending) -> None:
    """Every sum to a Python number in one transfer per device and dtype: a timed request's
    K outputs cost the GPU one wait, not one per output."""
    groups: dict[tuple[str, torch.dtype], Pending] = {}
    for entries, totals in pending:
        groups.setdefault((str(totals.device), totals.dtype), []).append((entries, totals))
    for items in groups.values():
        numbers = torch.cat([totals for _, totals in items]).tolist()
        flat_entries = [entry for entries, _ in items for entry in entries]
        for entry, number in zip(flat_entries, numbers, strict=True):
            entry["sum"] = number


def _weighted_float(flat: torch.Tensor, seed: int, square: bool) -> torch.Tensor:
    """sum_ij v_i w_j x_ij over the output viewed as rows of CHECKSUM_WIDTH (plus a tail
    weighted by t); with `square`, the same with v^2, w^2 and t^2 (for the band). One
    generator draws w, then v, then t, so both sides draw the same numbers."""
    width = CHECKSUM_WIDTH
    rows = flat.numel() // width
    work = torch.float64 if flat.dtype == torch.float64 else torch.float32
    generator = torch.Generator(device=flat.device).manual_seed(seed)
    w = torch.randn(width if rows else 0, generator=generator, device=flat.device, dtype=work)
    v = torch.randn(rows, generator=generator, device=flat.device, dtype=torch.float64)
    tail = flat[rows * width :].to(torch.float64)
    t = torch.randn(tail.numel(), generator=generator, device=flat.device, dtype=torch.float64)
    if square:
        w, v, t = w * w, v * v, t * t
    total = torch.dot(tail, t)
    if rows:
        partial = flat[: rows * width].view(rows, width).to(work) @ w
        total = total + torch.dot(partial.to(torch.float64), v)
    return total


def _weighted_int(flat: torch.Tensor, seed: int) -> torch.Tensor:
    generator = torch.Generator(device=flat.device).manual_seed(seed)
    weights = torch.randint(-1000, 1000, (flat.numel(),), generator=generator, device=flat.device)
    return (flat.to(torch.int64) * weights).sum()


def checksum_band(value: Any, seed: int) -> list[float | None]:
    """Per leaf (the reference's side): the standard deviation of checksum(candidate) -
    checksum(reference) when every element differs by allclose's full allowance
    tol * (1 + |ref|) with a random sign: the yardstick for a timed output's checksum."""
    return [_leaf_band(leaf, seed + 7919 * index) for index, leaf in enumerate(flatten(value))]


def _leaf_band(leaf: Any, leaf_seed: int) -> float | None:
    if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex()):
        allowance = _allowance(_flat_real(leaf), STRICT_TOLERANCE.get(leaf.dtype, 1e-4))
        variance = _weighted_float(allowance, leaf_seed, square=True)
        return float(variance.clamp_min(0.0).sqrt())
    return None
