"""Checksums that prove an output complete: per leaf, a commitment (agents/verify/commitment.py)
under a key the worker learns only with the request that asks for it (agents/verify/clock.py
times requests that end in them).

Why a key from the request: a checksum computable before the request could come from a
partial or precomputed output; keyed by the request, each needs the whole output, so a reply
cannot come before every output it covers exists. Why a nonlinear commitment: a linear one
factors through the inputs of a linear last step (see commitment.py), so it could be computed
without the output. Both sides draw the same keys, so the parent compares the candidate's
commitments with the reference's, within a band (`call_bands`) of what allclose's allowance
on every element would move them; and the reference's process recomputes the commitment of
any call's bytes the parent fetched (`recommit`), binding a claim to an output.

Entries come in `flatten(outputs)` order, call by call; a leaf position's keys depend on the
request's key, the position within one call's output, the request's call count K and the
call's index, never on how the work was split, so one call alone commits as within its K.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from agents.verify import commitment, values
from agents.verify.compare import STRICT_TOLERANCE
from agents.verify.side import flatten

RMS_TOLERANCE_CAP = 0.05
"""A scale is at most this over allclose's tolerance: s times the allowance's absolute part
stays under 4 x 0.05 radians, so the band's linearisation holds even for a tiny output."""


def _flat_real(leaf: torch.Tensor) -> torch.Tensor:
    flat = leaf.detach().reshape(-1)
    return torch.view_as_real(flat).reshape(-1) if flat.is_complex() else flat


def _plain(leaf: Any) -> bool:
    return (
        (type(leaf) is torch.Tensor or type(leaf) is torch.nn.Parameter)
        and not leaf.is_meta
        and leaf.layout == torch.strided
    )


def _scale(scales: list[float] | None, position: int) -> float:
    if scales and 0 <= position < len(scales):
        scale = float(scales[position])
        if math.isfinite(scale) and scale > 0:
            return scale
    return 1.0


def checksum(value: Any, seed: int, scales: list[float] | None = None) -> list[Any]:
    """Per leaf of one value (a request of one call), its entry: a tensor's commitment, a
    scalar as it is."""
    return call_checksums([value], seed, scales)


def call_checksums(outputs: list[Any], seed: int, scales: list[float] | None = None) -> list[Any]:
    """The entries of a timed request's K outputs, one per leaf of each call. A position whose
    K leaves are tensors alike is committed in one pass (commitment.commit stacks small ones);
    every call has keys of its own."""
    return _entries(outputs, seed, scales, first=0, calls=len(outputs))


def recommit(output: Any, seed: int, scales: list[float] | None, calls: int, call: int) -> list:
    """The entries call `call` of a request of `calls` would have had for this output: the
    reference's process recomputes a claim from the bytes the parent fetched (an opening)."""
    return _entries([output], seed, scales, first=call, calls=calls)


def _entries(
    outputs: list[Any], seed: int, scales, first: int, calls: int, band: bool = False
) -> list[Any]:
    per_call = [flatten(output) for output in outputs]
    width = len(per_call[0]) if per_call else 0
    if any(len(leaves) != width for leaves in per_call):  # structures differ: one long row
        per_call, first, calls = [[leaf for leaves in per_call for leaf in leaves]], 0, 1
        width = len(per_call[0])
    entries: list[Any] = [None] * (len(per_call) * width)
    for position in range(width):
        column = [leaves[position] for leaves in per_call]
        scale = _scale(scales, position)
        for index, entry in _column(column, seed, position, calls, first, scale, band):
            entries[index * width + position] = entry
    return entries


def _column(column: list[Any], seed, position, calls, first, scale, band):
    """(call index within `column`, entry or band) for every leaf of one position."""
    groups: dict[tuple, list[int]] = {}
    for index, leaf in enumerate(column):
        if not isinstance(leaf, torch.Tensor):
            yield index, None if band else {"scalar": values.pack(leaf)[0]}
        elif not _plain(leaf):
            subclass = type(leaf) is not torch.Tensor and type(leaf) is not torch.nn.Parameter
            yield index, None if band else {"kind": "subclass" if subclass else "not strided"}
        elif band and not (leaf.is_floating_point() or leaf.is_complex()):
            yield index, None  # integers and booleans: compared exactly
        else:
            groups.setdefault((leaf.dtype, leaf.numel(), str(leaf.device)), []).append(index)
    for (dtype, _, _), members in groups.items():
        # runs of consecutive calls: a block's keys are those of calls first+i, first+i+1, ...
        for run in _runs(members):
            rows = [_flat_real(column[index]) for index in run]
            start = first + run[0]
            if band:
                real = column[run[0]].real.dtype if dtype.is_complex else dtype
                tolerance = STRICT_TOLERANCE.get(real, 1e-4)
                sigmas = commitment.band(rows, seed, position, calls, start, scale, tolerance)
                yield from zip(run, sigmas.tolist(), strict=True)
                continue
            sums = commitment.commit(rows, seed, position, calls, start, scale).tolist()
            kind = {"kind": "tensor", "numel": rows[0].numel(), "dtype": str(dtype)}
            for index, number in zip(run, sums, strict=True):
                yield index, {**kind, "sum": number}


def _runs(members: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for index in members:
        if runs and runs[-1][-1] == index - 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return runs


def call_bands(outputs: list[Any], seed: int, scales: list[float] | None = None) -> list:
    """Per entry of `call_checksums` (the reference's side): the standard deviation of the
    commitment's change when every element differs by allclose's full allowance with a
    random sign; None for what is compared exactly (integers, booleans, scalars)."""
    return _entries(outputs, seed, scales, first=0, calls=len(outputs), band=True)


def checksum_band(value: Any, seed: int, scales: list[float] | None = None) -> list:
    """`call_bands` of one value (a request of one call)."""
    return call_bands([value], seed, scales)


def commitment_scales(value: Any) -> list[float]:
    """Per leaf of a reference output: 1 / its RMS over finite elements, so that s_i x_i
    spans O(1)-O(10) radians, at most RMS_TOLERANCE_CAP / tol; 1.0 for what has none."""
    scales = []
    for leaf in flatten(value):
        scale = 1.0
        if _plain(leaf) and (leaf.is_floating_point() or leaf.is_complex()) and leaf.numel():
            flat = _flat_real(leaf).to(torch.float64)
            finite = flat[torch.isfinite(flat)]
            rms = float(finite.square().mean().sqrt()) if finite.numel() else 0.0
            dtype = leaf.real.dtype if leaf.is_complex() else leaf.dtype
            cap = RMS_TOLERANCE_CAP / STRICT_TOLERANCE.get(dtype, 1e-4)
            scale = min(1.0 / rms, cap) if rms > 0 and math.isfinite(rms) else 1.0
        scales.append(scale)
    return scales
