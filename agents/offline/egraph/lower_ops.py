"""Lowering of the ops that return their input's values (copies, casts to the same dtype,
views to the same shape, dropout that drops nothing), of permutations, and of addmm.

Each no-op becomes `T.un(name, a)` with a name in NO_OPS, never `a` itself: the rule that
removes it (agents/offline/egraph/rules_identity.py) is then named in the plan and the lesson,
and the cost model sees what removing it saves. A no-op is lowered only where its side
condition holds by construction (the op's own arguments, the dims an op made), never because
of the example input's sizes.
"""

from __future__ import annotations

import builtins
import operator
from typing import Any

import torch
import torch.fx
import torch.nn as nn

from agents.offline.egraph.terms import MAX_RANK, T, pack
from agents.offline.fx import ops

Node = torch.fx.Node

NO_OPS = ("clone", "contiguous", "identity", "inactive_dropout", "same_cast", "same_view")
"""`T.un` names whose value is their input's; `clone` and `contiguous` copy, the rest do not."""

DROPOUT_MODULES = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)
DROPOUT_FUNCTIONS = {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout"}
DROPOUT_FUNCTIONS |= {"feature_alpha_dropout"}
_CASTS = {"float": torch.float32, "double": torch.float64, "half": torch.float16}
_CASTS |= {"bfloat16": torch.bfloat16}
_SWAPS = ("transpose", "swapaxes", "swapdims")


def inactive_dropout(gm: torch.fx.GraphModule, node: Node) -> Node | None:
    """The input of a dropout that draws nothing and returns its input: p == 0, or
    training=False written in the call (a module's p only: its mode changes at run time)."""
    module = ops.call_module(gm, node)
    if module is not None:
        if not isinstance(module, DROPOUT_MODULES) or module.p != 0 or module.inplace:
            return None
        x = node.args[0] if len(node.args) == 1 and not node.kwargs else None
        return x if isinstance(x, Node) else None
    if node.op not in ("call_function", "call_method"):
        return None
    if ops.op_name(node) not in DROPOUT_FUNCTIONS:
        return None
    args = ops.arguments(node, ("input", "p", "training", "inplace"))
    if not args or set(args) - {"input", "p", "training", "train", "inplace"}:
        return None
    x, p = args.get("input"), args.get("p", 0.5)
    training = args.get("training", args.get("train", True))
    if not isinstance(x, Node) or args.get("inplace", False) is not False:
        return None
    off = (ops.is_scalar(p) and p == 0) or training is False
    return x if off else None


def no_op(gm: torch.fx.GraphModule, node: Node) -> tuple[str, Node] | None:
    """(NO_OPS name, input) when the node returns its input's values with its shape and dtype."""
    dropped = inactive_dropout(gm, node)
    if dropped is not None:
        return ("inactive_dropout", dropped) if _same(node, dropped) else None
    module = ops.call_module(gm, node)
    if module is not None:
        x = node.args[0] if len(node.args) == 1 and not node.kwargs else None
        ok = isinstance(module, nn.Identity) and isinstance(x, Node) and _same(node, x)
        return ("identity", x) if ok else None
    if node.op not in ("call_function", "call_method") or not node.args:
        return None
    name, x = ops.op_name(node), node.args[0]
    if not isinstance(x, Node) or not _same(node, x):
        return None
    rest, kwargs = node.args[1:], dict(node.kwargs)
    if name == "clone" and not rest and set(kwargs) <= {"memory_format"}:
        fmt = kwargs.get("memory_format", torch.preserve_format)
        return ("clone", x) if fmt == torch.preserve_format else None
    if name == "contiguous" and not rest and set(kwargs) <= {"memory_format"}:
        fmt = kwargs.get("memory_format", torch.contiguous_format)
        return ("contiguous", x) if fmt == torch.contiguous_format else None
    dtype = ops.tensor_dtype(x)
    if node.op == "call_method" and name in _CASTS and not rest and not kwargs:
        return ("same_cast", x) if _CASTS[name] == dtype else None
    if node.op == "call_method" and name == "to" and len(rest) == 1 and not kwargs:
        return ("same_cast", x) if rest[0] == dtype else None
    if name in ("view", "reshape") and not kwargs and _same_sizes(x, rest):
        return "same_view", x
    return None


def _same(node: Node, x: Node) -> bool:
    meta, source = ops.tensor_meta(node), ops.tensor_meta(x)
    if meta is None or source is None:
        return False
    return tuple(meta.shape) == tuple(source.shape) and meta.dtype == source.dtype


def _same_sizes(x: Node, sizes: tuple[Any, ...]) -> bool:
    """Every size is x's own at that position (x.size(i), x.shape[i]), or one -1 with all
    the others x's: the same shape at any input size (a literal size is not)."""
    if len(sizes) == 1 and isinstance(sizes[0], tuple | list):
        sizes = tuple(sizes[0])
    rank = len(ops.tensor_shape(x) or ())
    if len(sizes) != rank:
        return False
    free = [i for i, s in enumerate(sizes) if s == -1 and not isinstance(s, bool)]
    pinned = [_size_of(s) == (x, i) for i, s in enumerate(sizes) if i not in free]
    return len(free) <= 1 and all(pinned)


def _size_of(node: Any) -> tuple[Any, int] | None:
    """(x, i) for `x.size(i)`, `x.shape[i]` or `x.size()[i]`, i normalised."""
    if not isinstance(node, Node) or len(node.args) != 2 or node.kwargs:
        return None
    source, index = node.args
    if not isinstance(index, int) or isinstance(index, bool):
        return None
    if ops.op_name(node) == "size" and node.op == "call_method":
        return _normalised(source, index)
    if node.op != "call_function" or node.target is not operator.getitem:
        return None
    if not isinstance(source, Node) or source.op not in ("call_function", "call_method"):
        return None
    if source.target is builtins.getattr and source.args[1:] == ("shape",):
        return _normalised(source.args[0], index)
    if ops.op_name(source) == "size" and len(source.args) == 1 and not source.kwargs:
        return _normalised(source.args[0], index)
    return None


def _normalised(x: Any, index: int) -> tuple[Any, int] | None:
    rank = len(ops.tensor_shape(x) or ())
    return (x, index % rank) if rank and -rank <= index < rank else None


# -- permutations ---------------------------------------------------------------------------


def permutation(node: Node) -> tuple[Node, list[int]] | None:
    """(input, order) for a permute, transpose/swapaxes/swapdims, .mT, or .t()/.T of rank
    below 3, with every dim a literal int."""
    if not node.args or not isinstance(node.args[0], Node) or node.kwargs:
        return None
    x, rest = node.args[0], node.args[1:]
    rank = len(ops.tensor_shape(x) or ())
    if ops.tensor_shape(x) is None or rank > MAX_RANK:
        return None
    name = ops.op_name(node)
    if node.op == "call_function" and node.target is builtins.getattr:
        name, rest = (rest[0] if rest and rest[0] in ("T", "mT") else None), ()
    order = list(range(rank))
    if name in _SWAPS and len(rest) == 2 and all(_is_dim(d, rank) for d in rest):
        d0, d1 = (d % rank for d in rest)
        order[d0], order[d1] = order[d1], order[d0]
        return x, order
    if name == "permute" and node.op == "call_method":
        given = rest[0] if len(rest) == 1 and isinstance(rest[0], tuple | list) else rest
        return _order(x, list(given), rank)
    if name == "permute" and len(rest) == 1 and isinstance(rest[0], tuple | list):
        return _order(x, list(rest[0]), rank)
    if name in ("t", "T") and not rest and rank <= 2:
        return x, order[::-1]
    if name == "mT" and rank >= 2:
        order[-2], order[-1] = order[-1], order[-2]
        return x, order
    return None


def _is_dim(d: Any, rank: int) -> bool:
    return isinstance(d, int) and not isinstance(d, bool) and -rank <= d < rank


def _order(x: Node, given: list[Any], rank: int) -> tuple[Node, list[int]] | None:
    if len(given) != rank or not all(_is_dim(d, rank) for d in given):
        return None
    order = [d % rank for d in given]
    return (x, order) if sorted(order) == list(range(rank)) else None


def permute_term(a: Any, order: list[int]) -> Any:
    """A two-dim swap stays a transpose (the rules about linear maps read those)."""
    moved = [k for k, d in enumerate(order) if d != k]
    if len(moved) == 2:
        return T.transpose(a, moved[0], moved[1])
    return T.permute(a, pack(order))


def squeeze_of_made_dim(node: Node) -> tuple[Node, int] | None:
    """(input, dim) for x.squeeze(d) where dim d of x is 1 by construction: x is
    x0.unsqueeze(d), or a keepdim reduction over d."""
    if len(node.args) != 2 or node.kwargs or ops.op_name(node) != "squeeze":
        return None
    x, dim = node.args
    rank = len(ops.tensor_shape(x) or ())
    if not isinstance(x, Node) or not _is_dim(dim, rank):
        return None
    dim %= rank
    makers = ("unsqueeze", "sum", "mean", "amax", "amin")
    args = ops.arguments(x) if ops.op_name(x) in makers else None
    if not args or not isinstance(args.get("dim"), int) or isinstance(args.get("dim"), bool):
        return None
    made = args["dim"] % rank
    keep = ops.op_name(x) == "unsqueeze" or args.get("keepdim") is True
    return (x, dim) if keep and made == dim else None


# -- addmm -------------------------------------------------------------------------------------


def addmm_parts(node: Node) -> tuple[Node, Node, Node, float, float] | None:
    """(input, mat1, mat2, beta, alpha) of torch.addmm / input.addmm with number scales."""
    if ops.op_name(node) != "addmm":
        return None
    args = ops.arguments(node, ("input", "mat1", "mat2"))
    if not args or set(args) - {"input", "mat1", "mat2", "beta", "alpha"}:
        return None
    beta, alpha = args.get("beta", 1), args.get("alpha", 1)
    parts = [args.get(k) for k in ("input", "mat1", "mat2")]
    if not all(isinstance(p, Node) for p in parts):
        return None
    if not (ops.is_scalar(beta) and ops.is_scalar(alpha)):
        return None
    return parts[0], parts[1], parts[2], float(beta), float(alpha)


def tensor_arguments(node: Node, limit: int = 8) -> list[Node]:
    """The tensor-valued nodes among a call's arguments (and in a list or tuple of them, as
    torch.cat takes), each once, in order; [] when there are more than `limit`."""
    found: list[Node] = []
    for value in [*node.args, *node.kwargs.values()]:
        for item in value if isinstance(value, tuple | list) else (value,):
            if isinstance(item, Node) and ops.tensor_shape(item) is not None and item not in found:
                found.append(item)
    return found if len(found) <= limit else []
