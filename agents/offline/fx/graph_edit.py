"""Small graph edits the rewriting passes share: redirect a node's users, and add nodes
with scalar arithmetic folded in Python (so a rewrite does not leave `x * 1.0` behind)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch.fx

from agents.offline.fx.ops import is_scalar


def replace_uses(node: torch.fx.Node, value: Any) -> None:
    """Point every user of `node` at `value` (a node or a constant); `node` becomes dead."""
    for user in list(node.users):
        user.args = _substitute(user.args, node, value)
        user.kwargs = _substitute(user.kwargs, node, value)


def _substitute(value: Any, old: torch.fx.Node, new: Any) -> Any:
    if value is old:
        return new
    if isinstance(value, tuple | list):
        return type(value)(_substitute(v, old, new) for v in value)
    if isinstance(value, dict):
        return {k: _substitute(v, old, new) for k, v in value.items()}
    if isinstance(value, slice):
        parts = (value.start, value.stop, value.step)
        return slice(*(_substitute(v, old, new) for v in parts))
    return value


class Builder:
    """Adds nodes at the graph's insertion point; scalar arithmetic stays in Python. None is
    the neutral value: 1 for mul/div, 0 for add/sub/neg."""

    def __init__(self, graph: torch.fx.Graph):
        self.graph = graph

    def call(self, target: Callable[..., Any], *args: Any, **kwargs: Any) -> torch.fx.Node:
        return self.graph.call_function(target, tuple(args), kwargs)

    def method(self, name: str, *args: Any, **kwargs: Any) -> torch.fx.Node:
        return self.graph.call_method(name, tuple(args), kwargs)

    def attr(self, target: str) -> torch.fx.Node:
        return self.graph.get_attr(target)

    def mul(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        if is_scalar(a) and is_scalar(b):
            return a * b
        return self.call(operator.mul, a, b)

    def div(self, a: Any, b: Any) -> Any:
        if b is None:
            return a
        if a is None:
            return 1.0 / b if is_scalar(b) else self.call(operator.truediv, 1.0, b)
        if is_scalar(a) and is_scalar(b):
            return a / b
        return self.call(operator.truediv, a, b)

    def add(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        if is_scalar(a) and is_scalar(b):
            return a + b
        return self.call(operator.add, a, b)

    def sub(self, a: Any, b: Any) -> Any:
        if b is None:
            return a
        if a is None:
            return self.neg(b)
        if is_scalar(a) and is_scalar(b):
            return a - b
        return self.call(operator.sub, a, b)

    def neg(self, a: Any) -> Any:
        if a is None:
            return None
        return -a if is_scalar(a) else self.call(operator.neg, a)
