"""One output against the reference's: its structure, the strict rule with the float64 anchor as
the second chance, and the reason a miss is refused with.

Why apart from the protocol (agents/verify/judge.py): these read only data (outputs described,
their parts read through the readers they are given, agents/verify/streamed.py), so they are
plain functions the trials and the timed full checks share, and tests call directly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from agents.verify import compare, values
from agents.verify.compare import OutputComparison
from agents.verify.side import flatten
from agents.verify.streamed import GoldLeaf, PartReader, compare_leaf


def judge_leaf(cand: Any, ref: Any, gold: Anchor, index: int, count: int) -> OutputComparison:
    """One output leaf held whole in memory, judged as the parent judges one it reads in
    parts (`judge_parts`): the same decision path, read from here."""
    if not isinstance(ref, torch.Tensor):
        return compare.compare_output(cand, ref, None)
    spec = values.TensorSpec(values.NAMES[ref.dtype], tuple(ref.shape), str(ref.device), "tensor")
    flat_ref, flat_cand = ref.detach().reshape(-1), cand.detach().reshape(-1)
    return judge_parts(
        index,
        spec,
        ["output"],
        lambda what, leaf, start, stop: flat_ref[start:stop],
        lambda what, leaf, start, stop: flat_cand[start:stop],
        gold,
        count,
    )[0]


def judge_parts(
    index: int,
    spec: values.TensorSpec,
    whats: list[str],
    reference: PartReader,
    candidate: PartReader,
    gold: Anchor,
    count: int,
    device: str = "cpu",
) -> list[OutputComparison]:
    """One tensor leaf of each candidate output in `whats`, read in parts: the strict rule on
    every element, with the anchor's sampled figures when it has them; on a miss, the
    float64 band is the second chance, on every element of the anchor (only then run and
    read: twice the output's bytes)."""
    first = gold.leaf(index, count, spec)
    results = compare_leaf(index, spec, whats, reference, candidate, first, device)
    if all(result.ok for result in results) or first.mode in ("whole", "parts"):
        return results
    second = gold.whole_leaf(index, count, spec)
    if second is None:
        return results
    missed = [slot for slot, result in enumerate(results) if not result.ok]
    again = [whats[slot] for slot in missed]
    for slot, result in zip(
        missed, compare_leaf(index, spec, again, reference, candidate, second, device), strict=True
    ):
        results[slot] = result
    return results


class Anchor:
    """The reference's float64 outputs for one set of inputs. When `eager` (the first trial,
    so the report carries the float64 figures) it is fetched at once, at a sample of each
    large output's elements; every element only when an output misses the strict rule and
    needs the band, the only use in which the anchor can pass anything: read in parts when
    `describe` (which runs it in the reference's worker and says what it holds) is given,
    else fetched whole."""

    def __init__(
        self,
        fetch: Callable[[int | None], tuple[values.Unpacked | None, list]],
        eager: bool,
        sample_seed: int | None = None,
        describe: Callable[[], values.Unpacked | None] | None = None,
    ) -> None:
        self._fetch = fetch
        self._describe = describe
        self.full = False
        self._seed = sample_seed
        self._leaves: list[Any] | None = None
        self._sampled: list = []
        self._whole: values.Unpacked | None = None
        self._asked = False
        if eager:
            gold, self._sampled = fetch(sample_seed)
            self._leaves = flatten(gold.value) if gold is not None else None

    def leaf(self, index: int, count: int, spec: values.TensorSpec) -> GoldLeaf:
        """What a first pass over leaf `index` (of `count`) has of the anchor."""
        leaves = self._leaves
        if leaves is None or len(leaves) != count:
            return GoldLeaf("none")
        gold, numel = leaves[index], math.prod(spec.shape)
        sampled = self._sampled[index] if index < len(self._sampled) else None
        if sampled is None or self._seed is None:
            whole = isinstance(gold, torch.Tensor) and gold.numel() == numel
            return GoldLeaf("whole", gold) if whole else GoldLeaf("none")
        if sampled != numel:
            return GoldLeaf("none")
        # the indices the reference sampled, drawn again here from the same seed
        return GoldLeaf("sample", gold, compare.sample_indices(numel, self._seed + index))

    def whole_leaf(self, index: int, count: int, spec: values.TensorSpec) -> GoldLeaf | None:
        """Every element of leaf `index`'s anchor (the band's second chance); None when the
        reference has no float64 kernel or its anchor has another structure."""
        self.full = True
        if not self._asked:
            self._asked = True
            self._whole = self._describe() if self._describe else self._fetch(None)[0]
        if self._whole is None:
            return None
        leaves = flatten(self._whole.value)
        if len(leaves) != count:
            return None
        gold, numel = leaves[index], math.prod(spec.shape)
        if isinstance(gold, values.Bare):
            fits = gold.spec.kind == "tensor" and math.prod(gold.spec.shape) == numel
            return GoldLeaf("parts") if fits else None
        fits = isinstance(gold, torch.Tensor) and gold.numel() == numel
        return GoldLeaf("whole", gold) if fits else None


def check_structure(leaves, output: values.Unpacked, expected, reference: values.Unpacked):
    """Exact count, type, shape, dtype, device and layout; no broadcasting."""
    if len(leaves) != len(expected):
        raise compare.OutputMismatch(
            f"returned {len(leaves)} outputs, the reference {len(expected)}"
        )
    for index, (cand, ref) in enumerate(zip(leaves, expected, strict=True)):
        where = f"output {index}"
        ref_spec = reference.spec_of(ref)
        if ref_spec is None:
            if type(cand) is not type(ref):
                raise compare.OutputMismatch(
                    f"{where} is {type(cand).__name__}, expected {type(ref).__name__}"
                )
            continue
        spec = output.spec_of(cand)
        if spec is None:
            raise compare.OutputMismatch(f"{where} is {type(cand).__name__}, not a tensor")
        if spec.kind == "subclass":
            raise compare.OutputMismatch(
                f"{where} is not a plain torch.Tensor (subclasses and lazy tensors are refused)"
            )
        if spec.kind != "tensor":
            raise compare.OutputMismatch(f"{where} is not a materialised strided tensor")
        if spec.shape != ref_spec.shape:
            raise compare.OutputMismatch(
                f"{where} has shape {spec.shape}, expected {ref_spec.shape}"
            )
        if spec.dtype != ref_spec.dtype:
            raise compare.OutputMismatch(
                f"{where} has dtype torch.{spec.dtype}, expected torch.{ref_spec.dtype}"
            )
        if spec.device != ref_spec.device:
            raise compare.OutputMismatch(f"{where} is on {spec.device}, expected {ref_spec.device}")


def mismatch_reason(label: str, when: str | None, index: int, result) -> str:
    run = f"{label}, candidate call {'1' if when == 'before' else '2'}" if when else label
    run += f", output {index}"
    if result.nonfinite:
        return f"{run}: NaN or Inf where the reference is finite"
    detail = f"max |diff| {result.max_abs_diff:.3g} fails allclose"
    if result.error_ratio is not None:
        detail += (
            f", and its error against float64 is {result.error_ratio:.3g}x the allowed "
            f"band ({compare.ERROR_FACTOR:g}x the fp32 reference's own error)"
        )
    return f"{run}: {detail}"
