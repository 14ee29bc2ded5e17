"""The global state a candidate's process starts from, and what changed after a call.

Why: a candidate that leaves global state changed (more threads, TF32 switched on, grad mode,
an aten kernel overridden, a global hook, a torch mode left active) runs under other rules than
the reference did. The reference lives in another process, so such changes can no longer bend
it; they are refused here by name because they change what the candidate's own numbers mean.
This check runs inside the candidate's process, so it is a tripwire for honest mistakes and
lazy cheats, not a security boundary: the verdict itself rests on data the parent compares,
and threads, processes and affinity are also read by the parent from outside (/proc).
"""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Any

import torch


def _backend_flags() -> dict[str, Any]:
    backends = torch.backends
    flags: dict[str, Any] = {
        "cudnn.enabled": backends.cudnn.enabled,
        "cudnn.benchmark": backends.cudnn.benchmark,
        "cudnn.deterministic": backends.cudnn.deterministic,
        "cudnn.allow_tf32": backends.cudnn.allow_tf32,
        "cuda.matmul.allow_tf32": backends.cuda.matmul.allow_tf32,
        "cuda.matmul.allow_fp16_reduced_precision_reduction": (
            backends.cuda.matmul.allow_fp16_reduced_precision_reduction
        ),
        "cuda.matmul.allow_bf16_reduced_precision_reduction": (
            backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        ),
        "mkldnn.enabled": backends.mkldnn.enabled,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    return flags


def _hook_counts() -> dict[str, int]:
    module = torch.nn.modules.module
    names = (
        "_global_forward_hooks",
        "_global_forward_pre_hooks",
        "_global_backward_hooks",
        "_global_backward_pre_hooks",
        "_global_module_registration_hooks",
        "_global_parameter_registration_hooks",
        "_global_buffer_registration_hooks",
    )
    return {name: len(getattr(module, name, {}) or {}) for name in names}


def snapshot(ops: list[str]) -> dict[str, Any]:
    """Everything a call must leave as it found it. `ops` are the aten operators the
    reference's forward calls: their dispatch tables are hashed (a kernel registered over
    one of them changes its table)."""
    try:
        affinity = sorted(os.sched_getaffinity(0))
    except AttributeError:
        affinity = []
    state: dict[str, Any] = {
        "threads": torch.get_num_threads(),
        "interop threads": torch.get_num_interop_threads(),
        "CPU affinity": affinity,
        "grad mode": torch.is_grad_enabled(),
        "inference mode": torch.is_inference_mode_enabled(),
        "anomaly mode": torch.is_anomaly_enabled(),
        "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
        "default dtype": str(torch.get_default_dtype()),
        "torch function modes": torch._C._len_torch_function_stack(),
        "torch dispatch modes": torch._C._len_torch_dispatch_stack(),
        "switch interval": sys.getswitchinterval(),
        **{f"torch.backends.{k}": v for k, v in _backend_flags().items()},
        **{f"nn.modules.module.{k}": v for k, v in _hook_counts().items()},
    }
    tables = hashlib.sha256()
    for op in sorted(set(ops)):
        try:
            tables.update(torch._C._dispatch_dump(op).encode())
        except RuntimeError:
            tables.update(f"{op}: missing".encode())
    state["dispatch tables of the reference's operators"] = tables.hexdigest()[:16]
    python_impls = sorted(getattr(torch.library, "_impls", set()))
    state["torch.library kernels on aten"] = [i for i in python_impls if i.startswith("aten/")]
    return state


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """One phrase per difference, naming the setting and both values."""
    found = []
    for name, old in before.items():
        new = after.get(name)
        if new != old:
            found.append(f"{name} {_short(old)} -> {_short(new)}")
    return found


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
