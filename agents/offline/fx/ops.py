"""The op tables the passes read nodes through: one name for an op whatever its spelling
(`torch.sum(x)`, `x.sum()`), its positional parameter names, and the shapes and dtypes shape
propagation recorded. Kept apart from tracing and codegen so rules can read graphs without
either."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from torch.fx.passes.shape_prop import TensorMetadata


def tensor_meta(node: Any) -> TensorMetadata | None:
    meta = node.meta.get("tensor_meta") if isinstance(node, torch.fx.Node) else None
    return meta if isinstance(meta, TensorMetadata) else None


def tensor_shape(node: Any) -> tuple[int, ...] | None:
    """The node's tensor shape from shape propagation; None for non-tensors and tuples."""
    meta = tensor_meta(node)
    return tuple(int(d) for d in meta.shape) if meta is not None else None


def tensor_dtype(node: Any) -> torch.dtype | None:
    meta = tensor_meta(node)
    return meta.dtype if meta is not None else None


def is_scalar(value: Any) -> bool:
    """A Python number constant (bools excluded: they are flags, not factors)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


_OPERATORS = {
    operator.add: "add",
    operator.sub: "sub",
    operator.mul: "mul",
    operator.truediv: "div",
    operator.neg: "neg",
    operator.matmul: "matmul",
    operator.pow: "pow",
    operator.getitem: "getitem",
}
_FUNCTION_ALIASES = {"true_divide": "div", "multiply": "mul", "subtract": "sub", "negative": "neg"}


def op_name(node: Any) -> str | None:
    """One name for an op whatever its spelling: `torch.sum(x)`, `x.sum()` -> "sum";
    `a * b`, `torch.mul` -> "mul"; `F.linear` -> "linear". call_module nodes give None."""
    if not isinstance(node, torch.fx.Node):
        return None
    if node.op == "call_method":
        return _FUNCTION_ALIASES.get(node.target, node.target)
    if node.op != "call_function":
        return None
    if node.target in _OPERATORS:
        return _OPERATORS[node.target]
    name = function_name(node.target)
    if name is None or not name.startswith(("torch.", "F.")):
        return None
    base = name.rsplit(".", 1)[-1]
    return _FUNCTION_ALIASES.get(base, base)


def call_module(gm: torch.fx.GraphModule, node: Any) -> torch.nn.Module | None:
    """The submodule a call_module node calls, else None."""
    if isinstance(node, torch.fx.Node) and node.op == "call_module":
        return gm.get_submodule(str(node.target))
    return None


# Positional parameter names of the ops the passes read; methods put `self` in "input".
SIGNATURES: dict[str, tuple[str, ...]] = {
    **{n: ("input", "dim", "keepdim") for n in ("sum", "mean", "amax", "amin", "logsumexp")},
    **{n: ("input", "dim", "keepdim") for n in ("max", "min", "prod", "nansum", "argmax")},
    **{n: ("input", "other") for n in ("add", "sub", "mul", "div", "matmul", "mm", "rsub")},
    **{n: ("input", "dim") for n in ("softmax", "log_softmax", "cumsum", "cumprod")},
    "linear": ("input", "weight", "bias"),
    "addmm": ("input", "mat1", "mat2"),
    "dropout": ("input", "p", "training", "inplace"),
    "transpose": ("input", "dim0", "dim1"),
    "squeeze": ("input", "dim"),
    "unsqueeze": ("input", "dim"),
    "neg": ("input",),
    "t": ("input",),
    "clone": ("input",),
    "contiguous": ("input",),
    "getitem": ("input", "index"),
}


def arguments(node: torch.fx.Node, names: tuple[str, ...] | None = None) -> dict[str, Any] | None:
    """The node's arguments by name (positional ones named from SIGNATURES); None when the
    op is unknown or has more positional arguments than its signature names."""
    names = names or SIGNATURES.get(op_name(node) or "")
    if names is None or len(node.args) > len(names):
        return None
    bound = dict(zip(names, node.args, strict=False))
    bound.update(node.kwargs)
    if "self" in bound and "input" not in bound:
        bound["input"] = bound.pop("self")
    return bound


def dims_of(value: Any, rank: int) -> tuple[int, ...] | None:
    """Normalised non-negative dims from an int or a sequence of ints; None otherwise."""
    items = list(value) if isinstance(value, list | tuple) else [value]
    if not items or not all(isinstance(d, int) and not isinstance(d, bool) for d in items):
        return None
    if not all(-rank <= d < rank for d in items) and rank > 0:
        return None
    return tuple(sorted({d % rank if rank else 0 for d in items}))


_NAMESPACES = (
    ("torch", torch),
    ("F", F),
    ("torch.linalg", torch.linalg),
    ("torch.special", torch.special),
    ("torch.fft", torch.fft),
    ("math", math),
    ("operator", operator),
)
_FUNCTION_NAMES: dict[int, str] = {}


def function_name(target: Callable[..., Any]) -> str | None:
    """How generated code spells a torch/F/math/operator function, e.g. "F.gelu"."""
    if not _FUNCTION_NAMES:
        for prefix, namespace in _NAMESPACES:
            for name in dir(namespace):
                if name.startswith("_"):
                    continue
                value = getattr(namespace, name, None)
                if callable(value) and not isinstance(value, type):
                    _FUNCTION_NAMES.setdefault(id(value), f"{prefix}.{name}")
    return _FUNCTION_NAMES.get(id(target))
