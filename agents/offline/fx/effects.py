"""Which nodes must run and which may share memory: in-place writes, random ops, stateful
modules and views. A rewrite that drops or reorders nodes asks here first, since a wrong
answer changes results rather than speed."""

from __future__ import annotations

import builtins
import operator
from typing import Any

import torch
import torch.fx

from agents.offline.fx.ops import arguments, call_module, op_name

_OPERATOR_WRITES = frozenset(
    {operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv}
    | {operator.ifloordiv, operator.imod, operator.ipow, operator.imatmul, operator.iand}
    | {operator.ior, operator.ixor, operator.ilshift, operator.irshift}
)


def is_mutating(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Does the node write into a tensor in place (x.add_, inplace=True, out=, setitem)?"""
    if node.kwargs.get("inplace") is True or "out" in node.kwargs:
        return True
    if node.op == "call_method":
        return node.target.endswith("_") and not node.target.endswith("__")
    if node.op == "call_function":
        if node.target in _OPERATOR_WRITES:
            return True
        name = getattr(node.target, "__name__", "")
        operators = getattr(node.target, "__module__", "") in ("operator", "_operator")
        return not operators and name.endswith("_") and not name.endswith("__")
    module = call_module(gm, node)
    return bool(getattr(module, "inplace", False))


def mutates_anything(gm: torch.fx.GraphModule) -> bool:
    """Does any in-place op write into a tensor that something else could see? Writing
    into a fresh intermediate that nothing read before (conv -> ReLU(inplace=True)) is
    harmless: rewrites only move reads later, never across such a write."""
    order = {node: index for index, node in enumerate(gm.graph.nodes)}
    return any(is_mutating(gm, node) and not _private_write(node, order) for node in gm.graph.nodes)


def _private_write(node: torch.fx.Node, order: dict[torch.fx.Node, int]) -> bool:
    target = node.args[0] if node.args else None
    return (
        "out" not in node.kwargs
        and isinstance(target, torch.fx.Node)
        and target.op in ("call_function", "call_method", "call_module")
        and _view_source(target) is None
        and all(order[user] >= order[node] for user in target.users)
    )


def has_effects(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Must the node run even when nobody uses its result? In-place writes, modules that
    keep buffers (BatchNorm statistics) or are not torch's own, and random ops (they
    advance the generator that later random ops draw from)."""
    if node.op in ("placeholder", "output") or is_mutating(gm, node):
        return True
    name = op_name(node) or ""
    module = call_module(gm, node)
    if "dropout" in name:
        args = arguments(node, ("input", "p", "training", "inplace")) or {}
        return args.get("p", 0.5) != 0 and args.get("training", args.get("train")) is not False
    if name.startswith(("rand", "bernoulli", "multinomial", "normal", "poisson")):
        return True
    if module is None:
        return False
    if isinstance(module, torch.nn.modules.dropout._DropoutNd):
        return module.p != 0
    return (
        not type(module).__module__.startswith("torch.nn.")
        or any(True for _ in module.buffers())
        or isinstance(module, torch.nn.RReLU)
    )


def prune(gm: torch.fx.GraphModule) -> None:
    """Drop nodes nobody uses unless they have effects; fx's own dead-code pass keeps too
    little (random ops) or too much (every module call)."""
    changed = True
    while changed:
        changed = False
        for node in reversed(list(gm.graph.nodes)):
            if node.users or has_effects(gm, node):
                continue
            gm.graph.erase_node(node)
            changed = True


VIEW_OPS = frozenset(
    {"view", "reshape", "squeeze", "unsqueeze", "transpose", "permute", "t", "expand"}
    | {"flatten", "unflatten", "narrow", "select", "getitem", "contiguous", "view_as", "unbind"}
    | {"swapaxes", "swapdims", "movedim", "moveaxis", "split", "chunk", "tensor_split", "T"}
    | {"mT", "detach", "to", "float", "double", "type", "type_as", "expand_as", "as_strided"}
    | {"diagonal", "unfold", "data", "real", "view_as_real", "dropout", "alpha_dropout"}
    | {"dropout1d", "dropout2d", "dropout3d", "feature_alpha_dropout", "feature_dropout"}
)
"""Ops whose result may share memory with their first argument (a cast or dropout may
return the input itself)."""
_ALIASING_MODULES = (
    torch.nn.Identity,
    torch.nn.Flatten,
    torch.nn.Unflatten,
    torch.nn.modules.dropout._DropoutNd,
)


def _view_source(node: torch.fx.Node) -> Any:
    name = op_name(node)
    if node.op == "call_function" and node.target is builtins.getattr:
        name = node.args[1] if isinstance(node.args[1], str) else None
    if name in VIEW_OPS and node.args:
        return node.args[0]
    owner = node.graph.owning_module
    if node.op != "call_module" or not node.args or owner is None:
        return None
    module = owner.get_submodule(str(node.target))
    return node.args[0] if isinstance(module, _ALIASING_MODULES) else None


def alias_base(node: Any) -> Any:
    """The node whose memory `node` may share, following view-like ops back."""
    while isinstance(node, torch.fx.Node):
        source = _view_source(node)
        if not isinstance(source, torch.fx.Node):
            return node
        node = source
    return node


def returned_as_view(node: torch.fx.Node) -> bool:
    """Is the node (or a view of it) among forward's outputs?"""
    stack, seen = [node], set()
    while stack:
        current = stack.pop()
        for user in current.users:
            if user.op == "output":
                return True
            if user not in seen and _view_source(user) is current:
                seen.add(user)
                stack.append(user)
    return False


def can_alias(gm: torch.fx.GraphModule, node: torch.fx.Node, replacement: Any) -> bool:
    """May `node` (a fresh tensor) be replaced by `replacement`, which may share memory with
    other tensors? Not when something writes into the node in place (the write would land
    in the shared tensor), nor when an input or parameter would be returned as the result
    (the caller would get the input itself)."""
    if any(is_mutating(gm, user) for user in node.users):
        return False
    base = alias_base(replacement)
    shared = isinstance(base, torch.fx.Node) and base.op in ("placeholder", "get_attr")
    return not (shared and returned_as_view(node))
