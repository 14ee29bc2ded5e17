"""What a term costs to run: seconds under a typical roofline of the device class, per node.

A node costs the larger of its bytes over the memory bandwidth and its FLOPs over the matmul
throughput, plus a fixed launch cost, on the example's shapes and a fixed ratio per device
class (never measured under the pass: the same source gets the same algebra on every machine
and under any load). The extractor hands a node only its children's costs, so a cost carries
the shape of its term with it (compared on seconds only). Only the ranking matters: the
sandbox times the result and the reviewer judges it, whatever the model says.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from egglog import EGraph, get_callable_args, get_callable_fn, get_literal_value

from agents.offline.egraph.terms import unpack

ELEMENT_BYTES = 4
LAUNCH_S = 2e-6
"""Each op's fixed cost (a kernel launch, a dispatch): two ops never cost the same as one."""
TIE_S = 1e-12
"""Added to a permute, so that a swap of two dims is written as the transpose it was."""

Shape = tuple[int, ...]


@dataclass(frozen=True, order=True)
class Cost:
    seconds: float
    shape: Shape | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Roofline:
    bytes_per_s: float
    flops_per_s: float

    @classmethod
    def for_device(cls, device: str) -> Roofline:
        """A typical machine of this device class, never a measurement: the proof is the
        same on every machine and under any load, and a sandboxed pass spends no seconds
        measuring (only the ranking of forms needs the ratio; the sandbox times the result)."""
        return cls(2e12, 5e13) if device == "cuda" else cls(1e10, 1e11)


class TermCost:
    """An egglog cost model: node seconds plus its children's (a tree cost, so a term never
    costs less than its parts and extraction cannot pick a cycle)."""

    def __init__(self, roofline: Roofline, leaf_shapes: Sequence[Shape | None], opaque: set[int]):
        self.roofline = roofline
        self.leaf_shapes = leaf_shapes
        self.opaque = opaque

    def __call__(self, egraph: EGraph, expr: Any, children: list[Any]) -> Cost:
        fn = str(get_callable_fn(expr))
        if not fn.startswith("T."):
            return Cost(0.0)
        args = [_literal(arg) for arg in get_callable_args(expr) or ()]
        shapes = [child.shape if isinstance(child, Cost) else None for child in children]
        shape = infer_shape(fn, args, shapes, self.leaf_shapes)
        own = self.own(fn, args, shapes, shape)
        return Cost(own + sum(c.seconds for c in children if isinstance(c, Cost)), shape)

    def own(self, fn: str, args: list[Any], shapes: list[Shape | None], out: Shape | None) -> float:
        if fn in ("T.const", "T.none", "T.cons"):
            return 0.0
        if fn == "T.extent":  # a size read: cheap, but never cheaper than its source, so
            return TIE_S  # that extraction reads it off a leaf where a rule put it there
        elements = _numel(out)
        if fn == "T.leaf" and int(args[0]) not in self.opaque:
            return 0.0
        if fn in ("T.leaf", "T.opaque"):  # an op no rule knows: a guess of a few passes
            return LAUNCH_S + 4 * elements * ELEMENT_BYTES / self.roofline.bytes_per_s
        if fn in ("T.full", "T.zeros_out"):
            return LAUNCH_S + elements * ELEMENT_BYTES / self.roofline.bytes_per_s
        if fn == "T.permute":
            return TIE_S + LAUNCH_S + 2 * elements * ELEMENT_BYTES / self.roofline.bytes_per_s
        moved = (elements + sum(_numel(s) for s in shapes if s is not None)) * ELEMENT_BYTES
        flops = 0.0
        if fn in ("T.linear", "T.scaled_linear") and shapes[1]:
            flops = 2.0 * elements * shapes[1][-1]
        elif fn == "T.matmul" and shapes[1]:
            flops = 2.0 * elements * shapes[1][0]
        elif fn == "T.conv" and shapes[1]:
            weight = shapes[1]
            flops = 2.0 * elements * _numel(weight) / max(weight[0], 1)
        seconds = max(moved / self.roofline.bytes_per_s, flops / self.roofline.flops_per_s)
        return LAUNCH_S + seconds


def _literal(arg: Any) -> Any:
    try:
        return get_literal_value(arg)
    except (TypeError, ValueError, AttributeError):
        return None  # an e-class (its cost comes in `children`)


def _numel(shape: Shape | None) -> int:
    return math.prod(shape) if shape is not None else 1


def infer_shape(
    fn: str, args: list[Any], shapes: list[Shape | None], leaves: Sequence[Shape | None]
) -> Shape | None:
    """The example shape of a node from its children's, for the costs."""
    if fn in ("T.leaf", "T.opaque"):
        return leaves[int(args[0])]
    if fn in ("T.const", "T.none"):
        return ()
    if fn in ("T.un", "T.soft", "T.norm"):
        return shapes[1]
    if fn in ("T.clamp",):
        return shapes[0]
    if fn == "T.full":
        return shapes[1]
    if fn == "T.bin":
        a, b = shapes[1], shapes[2]
        if a is None or b is None:
            return a or b
        return _broadcast(a, b)
    if fn == "T.red" and shapes[1] is not None:
        shape, dim, keep = list(shapes[1]), int(args[2]), bool(args[3])
        if dim >= len(shape):
            return None
        if keep:
            shape[dim] = 1
        else:
            del shape[dim]
        return tuple(shape)
    if fn in ("T.linear", "T.scaled_linear") and shapes[0] is not None and shapes[1] is not None:
        return (*shapes[0][:-1], shapes[1][0])
    if fn == "T.matmul" and shapes[0] is not None and shapes[1] is not None:
        return (*shapes[0][:-1], shapes[1][-1]) if len(shapes[1]) == 2 else None
    if fn == "T.conv" and shapes[0] is not None and shapes[1] is not None:
        return (shapes[0][0], shapes[1][0], *shapes[0][2:])  # spatial sizes: close enough
    if fn == "T.transpose" and shapes[0] is not None:
        shape, d0, d1 = list(shapes[0]), int(args[1]), int(args[2])
        if max(d0, d1) >= len(shape):
            return None
        shape[d0], shape[d1] = shape[d1], shape[d0]
        return tuple(shape)
    if fn == "T.squeeze" and shapes[0] is not None:
        return tuple(s for i, s in enumerate(shapes[0]) if i != int(args[1]))
    if fn == "T.unsqueeze" and shapes[0] is not None:
        shape = list(shapes[0])
        shape.insert(int(args[1]), 1)
        return tuple(shape)
    if fn == "T.diag" and shapes[0] is not None:
        return (shapes[0][0], shapes[0][0])
    return _infer_more(fn, args, shapes)


def _infer_more(fn: str, args: list[Any], shapes: list[Shape | None]) -> Shape | None:
    if fn == "T.permute" and shapes[0] is not None:
        order = unpack(int(args[1]))
        ok = sorted(order) == list(range(len(shapes[0])))
        return tuple(shapes[0][k] for k in order) if ok else None
    if fn == "T.channels" and shapes[0] is not None:
        return (_numel(shapes[0]), *[1] * (int(args[1]) - 1))
    if fn == "T.zeros_out" and shapes[0]:
        return (shapes[0][0],)
    if fn == "T.extent":
        return ()
    return None  # T.cons: a list, no tensor


def _broadcast(a: Shape, b: Shape) -> Shape:
    width = max(len(a), len(b))
    a, b = (1,) * (width - len(a)) + a, (1,) * (width - len(b)) + b
    return tuple(max(x, y) for x, y in zip(a, b, strict=True))
