"""One output against the reference's: its structure, the strict rule with the float64 anchor as
the second chance, and the reason a miss is refused with.

Why apart from the protocol (agents/verify/judge.py): these read only data the parent holds
(the outputs as unpacked, the reference's float64 anchor), so they are plain functions the
trials and the timed full checks share, and tests call directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.verify import compare, values
from agents.verify.side import flatten


def judge_leaf(cand: Any, ref: Any, gold: Anchor, index: int, count: int):
    """One output leaf's comparison: the strict rule on every element, with the anchor's
    sampled figures when it has them; on a miss, the float64 band is the second chance, on
    the whole anchor (only then computed and sent: twice the output's bytes)."""
    result = compare.compare_output(cand, ref, *gold.leaf(index, count))
    if not result.ok and not gold.full:
        result = compare.compare_output(cand, ref, *gold.leaf(index, count, full=True))
    return result


class Anchor:
    """The reference's float64 outputs for one set of inputs. When `eager` (the first trial,
    so the report carries the float64 figures) it is fetched at once, at a sample of each
    large output's elements; in full only when an output misses the strict rule and needs
    the band, the only use in which the anchor can pass anything."""

    def __init__(
        self,
        fetch: Callable[[int | None], tuple[values.Unpacked | None, list]],
        eager: bool,
        sample_seed: int | None = None,
    ) -> None:
        self._fetch = fetch
        self.full = False
        self._seed = sample_seed
        self._leaves: list[Any] | None = None
        self._sampled: list = []
        if eager:
            self._get(sample_seed)

    def _get(self, sample_seed: int | None) -> None:
        gold, self._sampled = self._fetch(sample_seed)
        self._leaves = flatten(gold.value) if gold is not None else None
        # no float64 kernel (gold None): the strict rule alone applies, nothing to fetch
        self.full = sample_seed is None or gold is None

    def leaf(self, index: int, count: int, full: bool = False) -> tuple[Any, Any]:
        """(anchor, sample indices or None) of one output leaf; (None, None) when absent."""
        if full and not self.full:
            self._get(None)
        leaves = self._leaves
        if leaves is None or len(leaves) != count:
            return None, None
        gold = leaves[index]
        numel = self._sampled[index] if index < len(self._sampled) else None
        if self.full or numel is None or self._seed is None:
            return gold, None
        # the indices the reference sampled, drawn again here from the same seed
        return gold, compare.sample_indices(int(numel), self._seed + index)


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
