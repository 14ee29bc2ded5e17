"""What each aten op must cost at least: FLOPs and bytes moved, and the bound verdict.

Costs come from one extra forward under a TorchDispatchMode that sees every aten op with its
real inputs and outputs (so output sizes are exact, not guessed from profiler shapes). The
timed, profiled forwards run without it, so its Python overhead never shows in the times.
FLOPs use torch's own `flop_registry` (mm, addmm, bmm, conv, sdpa...) where it knows the op,
shape formulas otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from agents.profile.lines import LineKey, LineRecorder
from agents.profile.report import Ceilings

aten = torch.ops.aten

SOFTMAX_FLOPS, NORM_FLOPS = 5, 8
OVERHEAD_ROOFLINE_SHARE = 0.05
"""An op whose roofline time is under this share of its time is not limited by hardware..."""
OVERHEAD_CALL_MS = {"cuda": 0.020, "cpu": 0.050}
"""...and if its calls are this short too, launch and dispatch overhead is what it costs."""

_SDPA = aten._scaled_dot_product_flash_attention
_SDPA_LIKE = {
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_attention_math",
    "aten::_scaled_dot_product_fused_attention_overrideable",
}
_SOFTMAX = {"aten::_softmax", "aten::_log_softmax", "aten::_safe_softmax", "aten::softmax"}
_NORMS = {
    "aten::native_layer_norm",
    "aten::native_batch_norm",
    "aten::cudnn_batch_norm",
    "aten::miopen_batch_norm",
    "aten::_native_batch_norm_legit",
    "aten::_native_batch_norm_legit_no_training",
    "aten::_batch_norm_with_update",
    "aten::_batch_norm_no_update",
    "aten::native_group_norm",
    "aten::_fused_rms_norm",
    "aten::rms_norm",
    "aten::layer_norm",
    "aten::batch_norm",
    "aten::group_norm",
    "aten::instance_norm",
}
_REDUCTIONS = {
    "aten::sum",
    "aten::mean",
    "aten::amax",
    "aten::amin",
    "aten::max",
    "aten::min",
    "aten::prod",
    "aten::var",
    "aten::std",
    "aten::var_mean",
    "aten::std_mean",
    "aten::norm",
    "aten::linalg_vector_norm",
    "aten::logsumexp",
    "aten::argmax",
    "aten::argmin",
    "aten::cumsum",
    "aten::cumprod",
}
_NO_DATA = {
    "aten::_unsafe_view",
    "aten::_reshape_alias",
    "aten::lift_fresh",
    "aten::resolve_conj",
    "aten::resolve_neg",
    "aten::empty",
    "aten::empty_like",
    "aten::empty_strided",
    "aten::new_empty",
    "aten::new_empty_strided",
}
"""Ops that allocate or relabel memory but move no data."""
_TF32_MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
_COPIES = {"aten::clone", "aten::_to_copy", "aten::copy_", "aten::contiguous", "aten::to"}
"""Ops that move data without arithmetic (clone is tagged pointwise, but computes nothing)."""
_WRITE_ONLY = {"aten::copy_": 1, "aten::fill_": 0, "aten::zero_": 0}
"""In-place ops whose destination (argument 0) is written, not read; value: inputs read."""


@dataclass
class OpCost:
    """One aten call's minimum work."""

    name: str
    flops: int
    bytes: int
    input_shapes: list[list[int]]
    dtype: str | None
    ceiling: str  # which compute ceiling bounds it: "fp32", "tf32" or "bf16" (see compute_ms)


class CostRecorder(TorchDispatchMode):
    """Records every aten call with the user line that issued it (from a LineRecorder)."""

    def __init__(self, lines: LineRecorder):
        super().__init__()
        self.lines = lines
        self.records: list[tuple[LineKey | None, OpCost]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        try:
            cost = op_cost(func, args, kwargs, out)
        except Exception:  # a formula that does not fit an exotic overload: count no work
            cost = OpCost(_op_name(func), 0, 0, [], None, ceiling="fp32")
        self.records.append((self.lines.current, cost))
        return out


def op_cost(func: Any, args: tuple, kwargs: dict, out: Any) -> OpCost:
    """FLOPs and minimum bytes of one aten call, from its real inputs and outputs."""
    name = _op_name(func)
    inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    floating = [t for t in inputs + outputs if t.is_floating_point() or t.is_complex()]
    dtype = str(floating[0].dtype).removeprefix("torch.") if floating else None
    flops, matrix = _flops(func, name, args, kwargs, out, inputs, outputs)
    on_cuda = any(t.is_cuda for t in inputs)
    return OpCost(
        name=name,
        flops=int(flops),
        bytes=_bytes(func, name, args, kwargs, outputs),
        input_shapes=[list(t.shape) for t in inputs],
        dtype=dtype,
        ceiling=_ceiling(name, matrix, dtype, on_cuda),
    )


def _ceiling(name: str, matrix: bool, dtype: str | None, on_cuda: bool) -> str:
    """Matmuls and convolutions in half precision run on tensor cores, and so do fp32 ones on
    CUDA where PyTorch allows TF32 (cuDNN convolutions do by default); the rest is bounded
    by the fp32 matmul ceiling, the best fp32 rate measured."""
    if not matrix:
        return "fp32"
    if dtype in ("bfloat16", "float16"):
        return "bf16"
    if dtype == "float32" and on_cuda:
        if "conv" in name and torch.backends.cudnn.allow_tf32:
            return "tf32"
        if name in _TF32_MATMULS and torch.backends.cuda.matmul.allow_tf32:
            return "tf32"
    return "fp32"


def _op_name(func: Any) -> str:
    schema = getattr(func, "_schema", None)
    return schema.name if schema is not None else str(func)


def _flops(func, name, args, kwargs, out, inputs, outputs) -> tuple[int, bool]:
    packet = getattr(func, "overloadpacket", None)
    if packet in flop_registry:
        return flop_registry[packet](*args, **kwargs, out_val=out), True
    if name in _SDPA_LIKE:
        return flop_registry[_SDPA](*args[:3], out_val=None), True
    if name in ("aten::mv", "aten::addmv"):
        matrix = args[1] if name == "aten::addmv" else args[0]
        return 2 * matrix.numel(), True
    if name in ("aten::dot", "aten::vdot"):
        return 2 * args[0].numel(), True
    if name in _COPIES:
        return 0, False
    first_in = inputs[0].numel() if inputs else 0
    first_out = outputs[0].numel() if outputs else 0
    if name in _SOFTMAX:
        return SOFTMAX_FLOPS * first_out, False
    if name in _NORMS:
        return NORM_FLOPS * first_in, False
    if "pool" in name:
        return _pool_window(name, args, inputs, outputs) * first_out, False
    tags = getattr(func, "tags", ())
    if name in _REDUCTIONS or torch.Tag.reduction in tags:
        return first_in, False
    if torch.Tag.pointwise in tags:
        return first_out, False
    return 0, False


def _pool_window(name: str, args: tuple, inputs: list, outputs: list) -> int:
    """Elements each pooled output reads: the kernel's size, or the adaptive window."""
    dims = next((int(c) for c in ("1", "2", "3") if f"{c}d" in name), 2)
    if "adaptive" in name:
        if not inputs or not outputs:
            return 1
        space_in = math.prod(inputs[0].shape[-dims:])
        space_out = max(1, math.prod(outputs[0].shape[-dims:]))
        return max(1, math.ceil(space_in / space_out))
    kernel = args[1] if len(args) > 1 else 1
    if isinstance(kernel, int):
        return kernel**dims
    kernel = list(kernel)
    if len(kernel) == 1:
        return kernel[0] ** dims
    return max(1, math.prod(kernel))


def _bytes(func, name, args, kwargs, outputs) -> int:
    """Each distinct tensor input read once, each output written once; views move nothing."""
    if getattr(func, "is_view", False) or name in _NO_DATA:
        return 0
    if name in _WRITE_ONLY:
        reads = [a for a in args[1 : 1 + _WRITE_ONLY[name]] if isinstance(a, torch.Tensor)]
    else:
        read_args = {k: v for k, v in kwargs.items() if k != "out"}
        reads = [t for t in tree_flatten((args, read_args))[0] if isinstance(t, torch.Tensor)]
    return _distinct_footprint(reads) + _distinct_footprint(outputs)


def _distinct_footprint(tensors: list[torch.Tensor]) -> int:
    seen: set[tuple] = set()
    total = 0
    for t in tensors:
        key = _identity(t)
        if key in seen:
            continue
        seen.add(key)
        total += footprint(t)
    return total


def _identity(t: torch.Tensor) -> tuple:
    if t.layout != torch.strided:
        return (id(t),)
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)


def footprint(t: torch.Tensor) -> int:
    """Bytes a tensor occupies: a broadcast (stride 0) dimension is stored once."""
    if t.layout != torch.strided:
        return t.numel() * t.element_size()
    if t.numel() == 0:
        return 0
    elements = math.prod(size for size, stride in zip(t.shape, t.stride(), strict=True) if stride)
    return elements * t.element_size()


def compute_ms(flops: int, ceiling: str, ceilings: Ceilings) -> float:
    """Time the FLOPs take at their ceiling (fp32 matmul where none other was measured)."""
    peak = {"bf16": ceilings.bf16_gflops, "tf32": ceilings.tf32_gflops}.get(ceiling)
    peak = peak or ceilings.matmul_gflops
    return flops / (peak * 1e6) if peak > 0 else 0.0


def memory_ms(nbytes: int, ceilings: Ceilings) -> float:
    return nbytes / (ceilings.memory_gbps * 1e6) if ceilings.memory_gbps > 0 else 0.0


@dataclass(frozen=True)
class Verdict:
    bound: str
    pct_of_peak: float
    roofline_ms: float


def classify(
    time_ms: float, compute: float, memory: float, kernel_calls: int, device: str
) -> Verdict:
    """Memory- or compute-bound by the larger roofline term; overhead-bound when the op is
    tiny and its time is far above both terms (launch and dispatch cost dominate)."""
    roofline = max(compute, memory)
    pct = min(100.0, 100.0 * roofline / time_ms) if time_ms > 0 else 0.0
    per_call = time_ms / max(kernel_calls, 1)
    tiny = OVERHEAD_CALL_MS.get(device, OVERHEAD_CALL_MS["cpu"])
    if time_ms > 0 and roofline < OVERHEAD_ROOFLINE_SHARE * time_ms and per_call < tiny:
        bound = "overhead"
    elif compute > memory:
        bound = "compute"
    else:
        bound = "memory"
    return Verdict(bound, pct, roofline)
