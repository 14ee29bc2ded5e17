"""Ops that return their input unchanged: neutral-element arithmetic, dropout with p=0,
no-op layout changes and view/permute pairs that cancel."""

from __future__ import annotations

import builtins
from typing import Any

import torch
import torch.fx
import torch.nn as nn

from agents.offline import fxtools as fx

Node = torch.fx.Node

_NEUTRAL = {"mul": 1, "div": 1, "pow": 1, "add": 0, "sub": 0}
_SYMBOL = {"mul": "*", "div": "/", "pow": "**", "add": "+", "sub": "-"}
_DROPOUTS = {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout"}
_DROPOUTS |= {"feature_alpha_dropout", "feature_dropout"}
_PERMUTES = {"transpose", "swapaxes", "swapdims", "permute", "t", "T", "mT"}

Identity = tuple[Any, str, bool]
"""(what replaces the node, what was removed, whether the node made a fresh tensor)."""


def identity_of(gm: torch.fx.GraphModule, node: Node) -> Identity | None:
    """The node's input when the node is an identity; `fresh` marks ops that copied."""
    module = fx.call_module(gm, node)
    if module is not None:
        return _identity_module(module, node)
    name = _name(node)
    if name in _NEUTRAL:
        return _neutral(node, name)
    if name in _DROPOUTS:
        return _dropout(node)
    if name in ("contiguous", "clone", "to", "float"):
        return _copy_or_cast(node, name)
    if name in ("view", "reshape"):
        return _same_view(node, name)
    if name in _PERMUTES:
        return _permute_pair(node)
    if name == "squeeze":
        return _squeeze_pair(node)
    return None


def _name(node: Node) -> str | None:
    if node.op == "call_function" and node.target is builtins.getattr and len(node.args) == 2:
        return node.args[1] if node.args[1] in ("T", "mT") else None
    return fx.op_name(node)


def _same_tensor(a: Any, b: Any) -> bool:
    meta_a, meta_b = fx.tensor_meta(a), fx.tensor_meta(b)
    if meta_a is None or meta_b is None:
        return False
    return tuple(meta_a.shape) == tuple(meta_b.shape) and meta_a.dtype == meta_b.dtype


def _identity_module(module: nn.Module, node: Node) -> Identity | None:
    if len(node.args) != 1 or node.kwargs or not isinstance(node.args[0], Node):
        return None
    if isinstance(module, nn.Identity):
        return node.args[0], "nn.Identity removed", False
    if isinstance(module, nn.modules.dropout._DropoutNd) and module.p == 0:
        return node.args[0], f"{type(module).__name__}(p=0) removed", False
    return None


def _neutral(node: Node, name: str) -> Identity | None:
    if node.kwargs or len(node.args) != 2:
        return None
    left, right = node.args
    neutral = _NEUTRAL[name]
    if isinstance(left, Node) and fx.is_scalar(right) and right == neutral:
        x = left
    elif name in ("mul", "add") and isinstance(right, Node) and fx.is_scalar(left):
        x = right if left == neutral else None
    else:
        x = None
    if x is None or not _same_tensor(node, x):
        return None
    return x, f"{_SYMBOL[name]} {neutral} removed", True


def _dropout(node: Node) -> Identity | None:
    args = fx.arguments(node, ("input", "p", "training", "inplace"))
    if not args or not isinstance(args.get("input"), Node):
        return None
    p = args.get("p", 0.5)
    training = args.get("training", args.get("train", True))
    if fx.is_scalar(p) and p == 0:
        return args["input"], "dropout with p=0 removed", False
    if training is False:
        return args["input"], "dropout with training=False removed", False
    return None


def _copy_or_cast(node: Node, name: str) -> Identity | None:
    x = node.args[0] if node.args else None
    meta = fx.tensor_meta(x)
    if meta is None or not _same_tensor(node, x):
        return None
    rest, kwargs = node.args[1:], dict(node.kwargs)
    if name == "contiguous":
        if rest or set(kwargs) - {"memory_format"}:
            return None
        if kwargs.get("memory_format", torch.contiguous_format) != torch.contiguous_format:
            return None
        if not _plainly_contiguous(tuple(meta.shape), tuple(meta.stride)):
            return None
        return x, ".contiguous() of a contiguous tensor removed", False
    if name == "clone":
        if rest or kwargs.get("memory_format", torch.preserve_format) != torch.preserve_format:
            return None
        return x, ".clone() of a tensor nothing writes removed", True
    if name == "float" and not rest and not kwargs and meta.dtype == torch.float32:
        return x, ".float() of a float32 tensor removed", False
    if name == "to" and len(rest) == 1 and not kwargs and rest[0] == meta.dtype:
        return x, f".to({rest[0]}) of a {rest[0]} tensor removed", False
    return None


def _plainly_contiguous(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Row-major strides with no size-1 dims: contiguous at any size, not by accident."""
    expected, step = [], 1
    for size in reversed(shape):
        expected.append(step)
        step *= size
    return all(s > 1 for s in shape) and tuple(reversed(expected)) == stride


def _sizes(node: Node) -> tuple[Any, ...]:
    sizes = tuple(node.args[1:])
    if len(sizes) == 1 and isinstance(sizes[0], tuple | list):
        sizes = tuple(sizes[0])
    return sizes + tuple(node.kwargs.get("shape", node.kwargs.get("size", ())))


def _same_view(node: Node, name: str) -> Identity | None:
    x = node.args[0] if node.args else None
    shape = fx.tensor_shape(x)
    if shape is None or not _same_tensor(node, x) or set(node.kwargs) - {"shape", "size"}:
        return None
    sizes = _sizes(node)
    if len(sizes) != len(shape):
        return None
    for position, size in enumerate(sizes):
        if isinstance(size, Node) and _size_of(size) != (x, position % len(shape)):
            return None
        if not isinstance(size, Node) and not (
            isinstance(size, int) and size in (-1, shape[position])
        ):
            return None
    return x, f".{name}() to the same shape removed", False


def _size_of(node: Node) -> tuple[Any, int] | None:
    """(x, i) for `x.shape[i]` / `x.size(i)`."""
    if fx.op_name(node) == "size" and len(node.args) == 2 and isinstance(node.args[1], int):
        return node.args[0], node.args[1]
    if fx.op_name(node) != "getitem" or not isinstance(node.args[1], int):
        return None
    source = node.args[0]
    if not isinstance(source, Node) or source.op != "call_function" or len(source.args) != 2:
        return None
    if source.target is builtins.getattr and source.args[1] == "shape":
        return source.args[0], node.args[1]
    if fx.op_name(source) == "size" and len(source.args) == 1:
        return source.args[0], node.args[1]
    return None


def _permutation(node: Any) -> list[int] | None:
    """The node as `input.permute(order)`, or None."""
    if not isinstance(node, Node) or not node.args or not isinstance(node.args[0], Node):
        return None
    name, rank = _name(node), len(fx.tensor_shape(node.args[0]) or ())
    order = list(range(rank))
    if name in ("transpose", "swapaxes", "swapdims") and len(node.args) == 3 and not node.kwargs:
        dims = [d % rank for d in node.args[1:] if isinstance(d, int)] if rank else []
        if len(dims) != 2:
            return None
        order[dims[0]], order[dims[1]] = order[dims[1]], order[dims[0]]
        return order
    if name == "permute" and not node.kwargs:
        given = node.args[1] if len(node.args) == 2 else node.args[1:]
        given = list(given) if isinstance(given, tuple | list) else [given]
        if len(given) != rank or not all(isinstance(d, int) for d in given):
            return None
        return [d % rank for d in given]
    if name in ("t", "T") and rank == 2 and len(node.args) == (1 if name == "t" else 2):
        return [1, 0]
    if name == "mT" and rank >= 2:
        order[-1], order[-2] = order[-2], order[-1]
        return order
    return None


def _permute_pair(node: Node) -> Identity | None:
    outer = _permutation(node)
    if outer is None:
        return None
    if outer == sorted(outer):
        return node.args[0], "a permutation that keeps every dim removed", False
    inner_node = node.args[0]
    inner = _permutation(inner_node)
    if inner is None or len(inner) != len(outer):
        return None
    if any(inner[outer[i]] != i for i in range(len(outer))):
        return None
    return inner_node.args[0], "two permutations that cancel removed", False


def _squeeze_pair(node: Node) -> Identity | None:
    inner = node.args[0] if node.args else None
    if len(node.args) != 2 or node.kwargs or fx.op_name(inner) != "unsqueeze":
        return None
    rank = len(fx.tensor_shape(inner) or ())
    if len(inner.args) != 2 or inner.kwargs or not rank:
        return None
    squeezed, added = node.args[1], inner.args[1]
    if not (isinstance(squeezed, int) and isinstance(added, int)):
        return None
    if squeezed % rank != added % rank:
        return None
    return inner.args[0], "unsqueeze then squeeze of the same dim removed", False
