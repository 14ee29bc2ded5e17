"""Outputs compared part by part, so the parent never holds a whole output (issue 34).

Why: the parent used to receive each output whole (the reference's, the candidate's two, and
on a miss the float64 anchor at twice the bytes) and compare in float64, about nine times an
output's bytes at once: 18 GB for a 2 GB output. Now the workers keep their outputs, the
parent asks for the same stretch of elements of each (`part` requests, CHUNK_BYTES at a time)
and adds each stretch to a running comparison (`compare.LeafComparison`), whose figures are
those of the whole leaf. Nothing is sampled that was not sampled before: the strict rule reads
every element, and the float64 band, when it decides, reads every element of the anchor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from agents.verify import compare
from agents.verify.compare import LeafComparison, OutputComparison
from agents.verify.values import DTYPES, TensorSpec

CHUNK_BYTES = 1 << 24
"""Bytes of one leaf read at a time: the parent's float64 work on a stretch is a few times
this, whatever the output's size."""

PartReader = Callable[[str, int, int, int], torch.Tensor]
"""(what, leaf, start, stop) -> elements [start, stop) of a leaf as a flat tensor; `what` is
"output", "previous" (the candidate's output before its last call) or "anchor"."""


@dataclass(frozen=True)
class GoldLeaf:
    """How one leaf's float64 anchor is at hand in a pass: not at all ("none"), whole (a
    small leaf the anchor's sample sent in full), at a sample of its elements ("sample":
    figures for the report, which pass nothing), or read in parts like the outputs."""

    mode: str  # "none" | "whole" | "sample" | "parts"
    values: torch.Tensor | None = None  # "whole": the leaf; "sample": the sampled elements
    indices: torch.Tensor | None = None  # "sample": their flat indices


def compare_leaf(
    leaf: int,
    spec: TensorSpec,
    whats: Sequence[str],
    reference: PartReader,
    candidate: PartReader,
    gold: GoldLeaf,
    device: str = "cpu",
) -> list[OutputComparison]:
    """Leaf `leaf` (the reference's spec, which the candidate's matched) of each candidate
    output named in `whats`, compared with the reference's, part by part. A part bit for bit
    equal to the same part of an output already compared has that part's figures."""
    dtype = DTYPES[spec.dtype]
    numel = math.prod(spec.shape)
    step = max(1, CHUNK_BYTES // max(1, torch.empty((), dtype=dtype).element_size()))
    anchored = gold.mode in ("whole", "parts")
    totals = [LeafComparison(dtype, anchored) for _ in whats]
    samples = _Samples(gold, len(whats), dtype) if gold.mode == "sample" else None
    for start in range(0, max(numel, 1), step):  # an empty leaf is one empty part
        stop = min(numel, start + step)
        ref = reference("output", leaf, start, stop)
        anchor = None
        if gold.mode == "whole" and gold.values is not None:
            anchor = gold.values.reshape(-1)[start:stop]
        elif gold.mode == "parts":
            anchor = reference("anchor", leaf, start, stop)
        seen: list[tuple[torch.Tensor, LeafComparison]] = []
        for slot, what in enumerate(whats):
            cand = candidate(what, leaf, start, stop)
            if samples is not None:
                samples.take(slot, start, stop, cand, ref)
            part = next((p for c, p in seen if compare.identical(c, cand)), None)
            if part is None:
                part = LeafComparison(dtype, anchored)
                part.add(*_placed(device, cand, ref, anchor))
                seen.append((cand, part))
            totals[slot].merge(part)
    results = [total.result() for total in totals]
    if samples is not None:
        results = [samples.figures(slot, result) for slot, result in enumerate(results)]
    return results


def as_tensor(payload: bytes | bytearray, dtype: torch.dtype) -> torch.Tensor:
    """A part's bytes as a flat tensor (no copy when they came as a bytearray)."""
    if not payload:
        return torch.empty(0, dtype=dtype)
    buffer = payload if isinstance(payload, bytearray) else bytearray(payload)
    return torch.frombuffer(buffer, dtype=dtype)


def _placed(device: str, cand, ref, anchor):
    """On the GPU the parent compares where a pass over a part takes microseconds; the host
    compares the same numbers when the GPU has no room."""
    if device != "cuda":
        return cand, ref, anchor
    try:
        return cand.cuda(), ref.cuda(), (anchor.cuda() if anchor is not None else None)
    except RuntimeError:
        return cand, ref, anchor


class _Samples:
    """The candidate's and the reference's values at the anchor's sampled elements, picked
    from the parts as they pass: the report's float64 figures, as the whole outputs gave."""

    def __init__(self, gold: GoldLeaf, count: int, dtype: torch.dtype) -> None:
        assert gold.indices is not None and gold.values is not None
        self.indices, self.gold = gold.indices, gold.values
        size = self.indices.numel()
        self.cand = [torch.empty(size, dtype=dtype) for _ in range(count)]
        self.ref = torch.empty(size, dtype=dtype)

    def take(self, slot: int, start: int, stop: int, cand, ref) -> None:
        hit = ((self.indices >= start) & (self.indices < stop)).nonzero().squeeze(1)
        if hit.numel():
            at = self.indices[hit] - start
            self.cand[slot][hit] = cand[at]
            self.ref[hit] = ref[at]

    def figures(self, slot: int, full: OutputComparison) -> OutputComparison:
        return compare.with_sample(full, self.cand[slot], self.ref, self.gold)
