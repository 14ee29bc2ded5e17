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
        full = compare_output(cand, ref, None)
        if full.nonfinite or not (ref.is_floating_point() or ref.is_complex()):
            return full
        index = sample.to(ref.device)
        on_sample = compare_output(
            cand.detach().reshape(-1)[index], ref.detach().reshape(-1)[index], ref64
        )
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
    if not isinstance(ref, torch.Tensor):
        same = cand == ref
        return OutputComparison(
            bool(same), None, 0.0 if same else float("inf"), None, None, None, False
        )
    cand_d = cand.detach()
    ref_d = ref.detach()
    if not (ref_d.is_floating_point() or ref_d.is_complex()):
        same = _equal(cand_d, ref_d)
        return OutputComparison(same, None, 0.0 if same else float("inf"), None, None, None, False)
    if ref_d.is_complex():
        cand_d, ref_d = torch.view_as_real(cand_d), torch.view_as_real(ref_d)
        if ref64 is not None:
            ref64 = torch.view_as_real(ref64.detach())
    tolerance = STRICT_TOLERANCE.get(ref.dtype, 1e-4)
    gold = None
    if ref64 is not None:
        gold = ref64.detach().to(device=ref_d.device, dtype=torch.float64)
    # Fast path, the common case: a float64 norm is finite only if every element is, so the
    # norms the float64 rule needs anyway double as the NaN/Inf check, and no elementwise mask
    # is built (masks cost more than the forward itself on large outputs).
    fast = _compare_finite(cand_d, ref_d, gold, tolerance)
    return fast if fast is not None else _compare_masked(cand_d, ref_d, gold, tolerance)


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


def _compare_finite(cand, ref, gold, tolerance: float) -> OutputComparison | None:
    """None when some value is NaN or Inf: the caller takes the masked path."""
    if gold is None:
        diff = cand.to(torch.float64).sub_(ref)
        if not _finite(_norm(diff)):
            return None
        strict_ok, max_abs = _strict_from_diff(diff, ref, tolerance)
        return OutputComparison(strict_ok, None, max_abs, None, None, None, False)
    cand_err = cand.to(torch.float64).sub_(gold)
    ref_err = ref.to(torch.float64).sub_(gold)
    l2 = (_norm(cand_err), _norm(ref_err), _norm(gold))
    maxima = (_norm(cand_err, math.inf), _norm(ref_err, math.inf), _norm(gold, math.inf))
    if not _finite(*l2, *maxima):
        return None
    ratio, l2_cand, l2_ref = _float64_band(l2, maxima, ref.dtype)
    strict_ok, max_abs = _strict_from_diff(cand_err.sub_(ref_err), ref, tolerance)
    return OutputComparison(strict_ok, ratio <= 1.0, max_abs, l2_cand, l2_ref, ratio, False)


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


def _ratio(error: torch.Tensor, scale: torch.Tensor) -> float:
    value, size = float(error), float(scale)
    if size == 0.0:
        return 0.0 if value == 0.0 else float("inf")
    return value / size


def _compare_masked(cand, ref, gold, tolerance: float) -> OutputComparison:
    """The rare case with NaN or Inf somewhere: compare where the values are finite."""
    cand64, ref32_64 = cand.to(torch.float64), ref.to(torch.float64)
    nonfinite = bool((~_isfinite(cand64) & _isfinite(ref32_64)).any())
    strict_ok = not nonfinite and _allclose(
        cand64, ref32_64, atol=tolerance, rtol=tolerance, equal_nan=True
    )
    finite = _isfinite(cand64) & _isfinite(ref32_64)
    diff = (cand64 - ref32_64).abs()[finite]
    max_abs = float(diff.max()) if diff.numel() else 0.0
    if gold is None or nonfinite:
        return OutputComparison(strict_ok, None, max_abs, None, None, None, nonfinite)
    mask = _isfinite(gold) & _isfinite(ref32_64)
    if not bool(mask.any()):
        return OutputComparison(strict_ok, None, max_abs, None, None, None, nonfinite)
    gold, cand_m, ref_m = gold[mask], cand64[mask], ref32_64[mask]
    if not bool(_isfinite(cand_m).all()):
        return OutputComparison(
            strict_ok, False, max_abs, float("inf"), None, float("inf"), nonfinite
        )
    cand_err, ref_err = cand_m - gold, ref_m - gold
    ratio, l2_cand, l2_ref = _float64_band(
        (_norm(cand_err), _norm(ref_err), _norm(gold)),
        (_norm(cand_err, float("inf")), _norm(ref_err, float("inf")), _norm(gold, float("inf"))),
        ref.dtype,
    )
    return OutputComparison(strict_ok, ratio <= 1.0, max_abs, l2_cand, l2_ref, ratio, nonfinite)
