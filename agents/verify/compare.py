"""Output comparison under two rules, both reported.

`strict`: KernelBench's rule, allclose at a dtype's tolerance against the same-precision
reference. `float64`: the candidate's error against a float64 run of the reference must stay
within a small factor of the reference's own error. The second rule accepts legitimate
reassociation (a sum moved ahead of a GEMM) that the first rejects on unlucky seeds, while
TF32/bf16 downgrades stay orders of magnitude outside its band.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

# Bound once, before any candidate code is imported, so patching torch cannot reach us.
_allclose = torch.allclose
_isfinite = torch.isfinite
_equal = torch.equal
_vector_norm = torch.linalg.vector_norm

STRICT_TOLERANCE = {
    torch.float32: 1e-4,
    torch.float16: 1e-2,
    torch.bfloat16: 1e-2,
    torch.float64: 1e-7,
}
ERROR_FACTOR = 4.0
"""How many times the fp32 reference's own error a candidate may have against float64."""
ERROR_FLOOR_EPS = 16.0
"""Floor of the band, in units of the dtype's epsilon, for references that are exact."""


ANCHOR_SAMPLE = 1 << 16
"""Output elements at which the first trial's float64 anchor is sent, for the report's
figures: the float64 forward still runs in full, but neither the transfer (twice the output's
bytes) nor the parent's comparison grows with the output. Nothing passes on a sample."""


def sample_indices(numel: int, seed: int, count: int = ANCHOR_SAMPLE) -> torch.Tensor | None:
    """The flat indices of a sample, the same in every process for the same seed (a CPU
    generator of the same torch); None when the whole output is no larger than the sample."""
    if numel <= count:
        return None
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(numel, (count,), generator=generator)


class OutputMismatch(Exception):
    """Outputs that cannot be compared at all (count, type, shape, dtype, device, layout)."""


@dataclass
class OutputComparison:
    """How one output of one call compared."""

    strict_ok: bool
    float64_ok: bool | None
    max_abs_diff: float
    candidate_error: float | None
    reference_error: float | None
    error_ratio: float | None
    nonfinite: bool
    sampled: bool = False  # the float64 figures come from a sample of the elements

    @property
    def ok(self) -> bool:
        """Strict everywhere, or within the float64 band everywhere; a band measured on a
        sample describes the output but passes nothing."""
        if self.nonfinite:
            return False
        return self.strict_ok or (bool(self.float64_ok) and not self.sampled)


def flatten(output: Any) -> list[Any]:
    """Tensors and scalars of a (nested) tuple/list/dict output, in a stable order."""
    if isinstance(output, list | tuple):
        return [leaf for item in output for leaf in flatten(item)]
    if isinstance(output, dict):
        return [leaf for key in sorted(output, key=str) for leaf in flatten(output[key])]
    return [output]


def check_structure(candidate: list[Any], reference: list[Any]) -> None:
    """Exact count, type, shape, dtype, device and layout; no broadcasting."""
    if len(candidate) != len(reference):
        raise OutputMismatch(f"returned {len(candidate)} outputs, the reference {len(reference)}")
    for index, (cand, ref) in enumerate(zip(candidate, reference, strict=True)):
        where = f"output {index}"
        if isinstance(ref, torch.Tensor):
            if type(cand) is not torch.Tensor and type(cand) is not torch.nn.Parameter:
                raise OutputMismatch(
                    f"{where} is {type(cand).__module__}.{type(cand).__name__}, "
                    "not a plain torch.Tensor (subclasses and lazy tensors are refused)"
                )
            if cand.is_meta or cand.layout != torch.strided:
                raise OutputMismatch(f"{where} is not a materialised strided tensor")
            if tuple(cand.shape) != tuple(ref.shape):
                raise OutputMismatch(
                    f"{where} has shape {tuple(cand.shape)}, expected {tuple(ref.shape)}"
                )
            if cand.dtype != ref.dtype:
                raise OutputMismatch(f"{where} has dtype {cand.dtype}, expected {ref.dtype}")
            if cand.device != ref.device:
                raise OutputMismatch(f"{where} is on {cand.device}, expected {ref.device}")
        elif type(cand) is not type(ref):
            raise OutputMismatch(f"{where} is {type(cand).__name__}, expected {type(ref).__name__}")


def on_device(cand: Any, ref: Any, device: str = "cuda") -> tuple[Any, Any]:
    """Two received tensors on the GPU for the parent's comparison (passes over a GB take
    milliseconds there, seconds on the host); both left on the host when the GPU has no
    room for them."""
    if not (isinstance(cand, torch.Tensor) and isinstance(ref, torch.Tensor)):
        return cand, ref
    try:
        return cand.to(device), ref.to(device)
    except RuntimeError:  # out of memory: the host compares the same numbers, slower
        return cand.cpu(), ref.cpu()


def identical(a: Any, b: Any) -> bool:
    """Bit for bit the same value: same type, and for tensors the same dtype, shape and
    bytes (NaN payloads included, so a NaN output is never waved through as equal)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
            return False
        if a.numel() == 0:
            return True
        if not (a.is_contiguous() and b.is_contiguous()):
            a, b = a.contiguous(), b.contiguous()
        return bool(torch.equal(_bits(a), _bits(b)))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return False
    return type(a) is type(b) and a == b and not (isinstance(a, float) and math.isnan(a))


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as integers of its width (NaN compares unequal as a float)."""
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    if tensor.dtype == torch.bool:
        return tensor
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    return tensor.view(width)


def compare_output(
    cand: Any, ref: Any, ref64: Any | None, sample: torch.Tensor | None = None
) -> OutputComparison:
    """Compare one output leaf (structure already checked). With `sample` (flat indices),
    `ref64` holds the float64 anchor at those elements only: the strict rule still reads
    every element, the float64 figures come from the sample and pass nothing."""
    if sample is not None and isinstance(ref, torch.Tensor) and ref64 is not None:
        index = sample.to(ref.device)
        return with_sample(
            compare_output(cand, ref, None),
            cand.detach().reshape(-1)[index],
            ref.detach().reshape(-1)[index],
            ref64,
        )
    if not isinstance(ref, torch.Tensor):
        same = cand == ref
        return OutputComparison(
            bool(same), None, 0.0 if same else float("inf"), None, None, None, False
        )
    leaf = LeafComparison(ref.dtype, anchored=ref64 is not None)
    leaf.add(cand, ref, ref64)
    return leaf.result()


def with_sample(full: OutputComparison, cand: Any, ref: Any, ref64: Any) -> OutputComparison:
    """`full` (the strict rule on every element) with the float64 figures of a sample:
    `cand`, `ref` and `ref64` at the same sampled elements. A band on a sample passes nothing."""
    if full.nonfinite or not (ref.is_floating_point() or ref.is_complex()):
        return full
    on_sample = compare_output(cand, ref, ref64)
    return OutputComparison(
        full.strict_ok,
        on_sample.float64_ok,
        full.max_abs_diff,
        on_sample.candidate_error,
        on_sample.reference_error,
        on_sample.error_ratio,
        False,
        sampled=True,
    )


class LeafComparison:
    """One tensor leaf compared stretch by stretch (`add` each stretch of elements, in any
    number of parts): the figures are those of the whole leaf at once, but no process needs
    more than one stretch of it in memory. Sums of squares and maxima add up across parts;
    the strict rule and the NaN/Inf checks are per element, so they hold part by part."""

    def __init__(self, dtype: torch.dtype, anchored: bool) -> None:
        self.dtype = dtype
        self.floating = dtype.is_floating_point or dtype.is_complex
        self.anchored = anchored and self.floating  # integer outputs: equality alone
        self.tolerance = STRICT_TOLERANCE.get(dtype, 1e-4)
        self.strict_ok, self.nonfinite, self.max_abs = True, False, 0.0
        self.banded = False  # some element had a float64 figure
        self.cand_nonfinite = False  # a candidate NaN/Inf where anchor and reference are finite
        self.squares = [0.0, 0.0, 0.0]  # of the candidate's error, the reference's, the anchor
        self.maxima = [0.0, 0.0, 0.0]

    def add(self, cand: torch.Tensor, ref: torch.Tensor, ref64: torch.Tensor | None) -> None:
        """One stretch: the same elements of the candidate's, the reference's and (when
        anchored) the float64 anchor's output, as tensors of the same shape."""
        cand_d, ref_d = cand.detach(), ref.detach()
        if not self.floating:
            same = bool(_equal(cand_d, ref_d))
            self.strict_ok &= same
            self.max_abs = max(self.max_abs, 0.0 if same else float("inf"))
            return
        gold = None
        if ref_d.is_complex():
            cand_d, ref_d = torch.view_as_real(cand_d), torch.view_as_real(ref_d)
            if ref64 is not None:
                ref64 = torch.view_as_real(ref64.detach())
        if self.anchored and ref64 is not None:
            gold = ref64.detach().to(device=ref_d.device, dtype=torch.float64)
        if ref_d.numel() == 0:
            self.banded |= gold is not None
            return
        # Fast path, the common case: a float64 norm is finite only if every element is, so
        # the norms the float64 rule needs anyway double as the NaN/Inf check, and no
        # elementwise mask is built (masks cost more than the forward itself on large outputs).
        if not self._add_finite(cand_d, ref_d, gold):
            self._add_masked(cand_d, ref_d, gold)

    def merge(self, other: LeafComparison) -> None:
        """Add another stretch's figures (compared apart) to these."""
        self.strict_ok &= other.strict_ok
        self.nonfinite |= other.nonfinite
        self.max_abs = max(self.max_abs, other.max_abs)
        self.banded |= other.banded
        self.cand_nonfinite |= other.cand_nonfinite
        for slot in range(3):
            self.squares[slot] += other.squares[slot]
            self.maxima[slot] = max(self.maxima[slot], other.maxima[slot])

    def result(self) -> OutputComparison:
        strict_ok, nonfinite = self.strict_ok and not self.nonfinite, self.nonfinite
        if not self.anchored or nonfinite or not self.banded:
            return OutputComparison(strict_ok, None, self.max_abs, None, None, None, nonfinite)
        if self.cand_nonfinite:
            inf = float("inf")
            return OutputComparison(strict_ok, False, self.max_abs, inf, None, inf, nonfinite)
        l2 = [math.sqrt(value) for value in self.squares]
        ratio, l2_cand, l2_ref = _float64_band(l2, self.maxima, self.dtype)
        return OutputComparison(
            strict_ok, ratio <= 1.0, self.max_abs, l2_cand, l2_ref, ratio, nonfinite
        )

    def _strict(self, diff: torch.Tensor, ref: torch.Tensor) -> None:
        strict_ok, max_abs = _strict_from_diff(diff, ref, self.tolerance)
        self.strict_ok &= strict_ok
        self.max_abs = max(self.max_abs, max_abs)

    def _band(self, errors: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
        self.banded = True
        for slot, error in enumerate(errors):
            self.squares[slot] += float(_norm(error)) ** 2
            self.maxima[slot] = max(self.maxima[slot], float(_norm(error, math.inf)))

    def _add_finite(self, cand, ref, gold) -> bool:
        """False, having changed nothing, when some value is NaN or Inf."""
        if gold is None:
            diff = cand.to(torch.float64).sub_(ref)
            if not _finite(_norm(diff)):
                return False
            self._strict(diff, ref)
            return True
        cand_err = cand.to(torch.float64).sub_(gold)
        ref_err = ref.to(torch.float64).sub_(gold)
        norms = [_norm(x) for x in (cand_err, ref_err, gold)]
        norms += [_norm(x, math.inf) for x in (cand_err, ref_err, gold)]
        if not _finite(*norms):
            return False
        self.banded = True
        for slot in range(3):
            self.squares[slot] += float(norms[slot]) ** 2
            self.maxima[slot] = max(self.maxima[slot], float(norms[3 + slot]))
        self._strict(cand_err.sub_(ref_err), ref)
        return True

    def _add_masked(self, cand, ref, gold) -> None:
        """The rare stretch with NaN or Inf somewhere: compared where the values are finite."""
        cand64, ref64 = cand.to(torch.float64), ref.to(torch.float64)
        nonfinite = bool((~_isfinite(cand64) & _isfinite(ref64)).any())
        self.nonfinite |= nonfinite
        self.strict_ok &= not nonfinite and _allclose(
            cand64, ref64, atol=self.tolerance, rtol=self.tolerance, equal_nan=True
        )
        finite = _isfinite(cand64) & _isfinite(ref64)
        diff = (cand64 - ref64).abs()[finite]
        self.max_abs = max(self.max_abs, float(diff.max()) if diff.numel() else 0.0)
        if gold is None or nonfinite:
            return
        mask = _isfinite(gold) & _isfinite(ref64)
        if not bool(mask.any()):
            return
        gold, cand_m, ref_m = gold[mask], cand64[mask], ref64[mask]
        if not bool(_isfinite(cand_m).all()):
            self.banded, self.cand_nonfinite = True, True
            return
        self._band((cand_m - gold, ref_m - gold, gold))


def _norm(tensor: torch.Tensor, order: float = 2.0) -> torch.Tensor:
    return _vector_norm(tensor, ord=order, dtype=torch.float64)


def _finite(*values: torch.Tensor) -> bool:
    return all(math.isfinite(float(value)) for value in values)


def _strict_from_diff(
    diff: torch.Tensor, ref: torch.Tensor, tolerance: float
) -> tuple[bool, float]:
    """allclose(atol=rtol=tolerance) and max |diff|, from a float64 difference (consumed)."""
    absdiff = diff.abs_()
    max_abs = float(absdiff.max()) if absdiff.numel() else 0.0
    slack = absdiff.sub_(ref.abs().to(torch.float64).mul_(tolerance))
    worst = float(slack.max()) if slack.numel() else 0.0
    return worst <= tolerance, max_abs


def _float64_band(l2, maxima, dtype: torch.dtype) -> tuple[float, float, float]:
    """Worst ratio of the candidate's error to the band, over the relative L2 error (overall
    accuracy) and the relative max error (a few bad elements cannot hide in a large norm)."""
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 1e-7
    floor = ERROR_FLOOR_EPS * eps
    l2_cand, l2_ref = _ratio(l2[0], l2[2]), _ratio(l2[1], l2[2])
    max_cand, max_ref = _ratio(maxima[0], maxima[2]), _ratio(maxima[1], maxima[2])
    ratio = max(
        l2_cand / max(ERROR_FACTOR * l2_ref, floor),
        max_cand / max(ERROR_FACTOR * max_ref, floor),
    )
    return ratio, l2_cand, l2_ref


def _ratio(error: Any, scale: Any) -> float:
    value, size = float(error), float(scale)
    if size == 0.0:
        return 0.0 if value == 0.0 else float("inf")
    return value / size
