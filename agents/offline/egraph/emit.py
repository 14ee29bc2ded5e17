"""From an extracted term back to fx nodes (and so to readable ModelNew source).

Every constructor becomes the plain torch call a person would write. A constant (`full`)
takes its shape, dtype and device from its source term computed on the meta device: no
data is touched and no shape is written into the code, so the result follows the inputs.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from egglog import get_callable_args, get_callable_fn, get_literal_value

from agents.offline.egraph.lower import Lowered
from agents.offline.egraph.lower_ops import tensor_arguments as fx_tensor_arguments
from agents.offline.egraph.terms import unpack
from agents.offline.fx import graph_edit, ops, tracing

UNARY = {
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "gelu": F.gelu,
    "silu": F.silu,
    "exp": torch.exp,
    "log": torch.log,
    "neg": torch.neg,
    "abs": torch.abs,
    "sqrt": torch.sqrt,
    "softplus": F.softplus,
    "elu": F.elu,
    "leaky_relu": F.leaky_relu,
    "hardtanh": F.hardtanh,
    "mish": F.mish,
    "erf": torch.erf,
}
BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "pow": torch.pow,
}
SCALAR_BINARY = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "pow": operator.pow,
}
"""Python's operators, for a binary op whose first operand is a number at run time (a
constant, a float read from self, a size): torch.mul(2.0, x) is a TypeError, 2.0 * x is not."""
SIZE_READS = {"size", "getitem", "dim", "numel"}
"""Ops on a tensor's shape, re-read off a tensor's new form when a call is copied."""
COPIES = {"clone", "contiguous"}
"""The no-ops (lower_ops.NO_OPS) that copy, written as such; the others are their input."""
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
SHAPE_KEEPING = {"T.un", "T.clamp", "T.soft", "T.norm"}


class EmitError(Exception):
    """A term this emitter cannot write (the rewrite is declined, never half-written)."""


def _reads(node: torch.fx.Node) -> list[Any]:
    """The nodes a size read reads, through getitem and getattr(x, "shape")."""
    found, stack = [], list(node.all_input_nodes)
    while stack:
        current = stack.pop()
        found.append(current)
        if ops.op_name(current) in SIZE_READS or current.target is getattr:
            stack.extend(current.all_input_nodes)
    return found


def parts(term: Any) -> tuple[str, list[Any]]:
    """(constructor name, arguments) of a term; literals come back as Python values."""
    name = str(get_callable_fn(term))
    args = []
    for arg in get_callable_args(term) or ():
        fn = get_callable_fn(arg)
        args.append(arg if fn is not None and str(fn).startswith("T.") else get_literal_value(arg))
    return name, args


class Emitter:
    """Writes terms into `low.gm.graph` before its output node."""

    def __init__(self, low: Lowered) -> None:
        self.low = low
        self.graph = low.gm.graph
        self.build = graph_edit.Builder(self.graph)
        # Keyed by the term's text: egglog's hash of a term mixes Python's hashes of its
        # literals, and hash(-1.0) == hash(-2.0), so two constants would share one node.
        self._done: dict[tuple[str, bool], Any] = {}
        self._active: set[str] = set()
        # A term as lowered stands for its original node: untouched code stays as written
        # (not a node an in-place op writes later: here it holds another value).
        for node, term in low.terms.items():
            if node.op not in ("placeholder", "get_attr", "output") and node not in low.stale:
                self._done.setdefault((str(term), False), node)
        self._scalars: set[Any] = {n for n in low.leaves if tracing.self_scalar(n) is not None}
        # Set while writing before an op kept in place: only what is computed before it
        # may be read (the original nodes after it are not there yet).
        self.before: torch.fx.Node | None = None
        self._order = {node: index for index, node in enumerate(self.graph.nodes)}

    def emit(self, term: Any, meta: bool = False) -> Any:
        key = (str(term), meta)
        if key in self._done and self._readable(self._done[key]):
            return self._done[key]
        if key[0] in self._active:
            raise EmitError("the extracted term refers to itself")
        self._active.add(key[0])
        try:
            value = self._emit(term, meta)
        finally:
            self._active.discard(key[0])
        self._done[key] = value
        return value

    def _emit(self, term: Any, meta: bool) -> Any:
        name, args = parts(term)
        b = self.build
        if name == "T.leaf":
            return self._leaf(int(args[0]), meta)
        if name == "T.const":
            return float(args[0])
        if name == "T.none":
            return None
        if meta and name in SHAPE_KEEPING:  # same shape, dtype and device as the input
            return self.emit(args[0] if name == "T.clamp" else args[1], True)
        if name == "T.un":
            x = self.emit(args[1], meta)
            if args[0] in COPIES:
                return b.method(args[0], x)
            return b.call(UNARY[args[0]], x) if args[0] in UNARY else x
        if name == "T.bin":
            return self._binary(args[0], self.emit(args[1], meta), self.emit(args[2], meta))
        if name == "T.clamp":
            low, high = (None if math.isinf(v) else float(v) for v in args[1:3])
            return b.call(torch.clamp, self.emit(args[0], meta), min=low, max=high)
        if name == "T.red":  # as a method, as people write it: self.weight.sum(0, keepdim=True)
            x = self.emit(args[1], meta)
            return b.method(args[0], x, int(args[2]), keepdim=bool(args[3]))
        if name == "T.soft":
            op = torch.softmax if args[0] == "softmax" else torch.log_softmax
            return b.call(op, self.emit(args[1], meta), int(args[2]))
        if name == "T.linear":
            x, w, bias = (self.emit(a, meta) for a in args)
            return b.call(F.linear, x, w, bias)
        if name == "T.scaled_linear":
            x, bias, alpha = (self.emit(a, meta) for a in (args[0], args[2], args[3]))
            if bias is not None and (not isinstance(bias, torch.fx.Node) or bias in self._scalars):
                raise EmitError("an addmm's input must be a tensor, not a number")
            weight_t = self._transposed(args[1], meta)
            if bias is None:
                zero = b.method("new_zeros", x, ())
                return b.call(torch.addmm, zero, x, weight_t, beta=0, alpha=alpha)
            return b.call(torch.addmm, bias, x, weight_t, alpha=alpha)
        if name == "T.matmul":
            return b.call(torch.matmul, self.emit(args[0], meta), self.emit(args[1], meta))
        if name == "T.diag":
            return b.call(torch.diag, self.emit(args[0], meta))
        if name == "T.conv":
            spec = self.low.convs[int(args[3])]
            x, w, bias = (self.emit(a, meta) for a in args[:3])
            return b.call(
                CONV[spec.dims], x, w, bias, spec.stride, spec.padding, spec.dilation, spec.groups
            )
        if name == "T.norm":
            original = self.low.norms[int(args[4])]
            return self.graph.call_module(original.target, (self.emit(args[1], meta),))
        if name == "T.transpose":
            return b.call(torch.transpose, self.emit(args[0], meta), int(args[1]), int(args[2]))
        if name == "T.squeeze":
            return b.method("squeeze", self.emit(args[0], meta), int(args[1]))
        if name == "T.unsqueeze":
            return b.method("unsqueeze", self.emit(args[0], meta), int(args[1]))
        if name == "T.full":
            return self._full(float(args[0]), args[1], meta)
        if name == "T.permute":
            return b.call(torch.permute, self.emit(args[0], meta), tuple(unpack(int(args[1]))))
        if name == "T.channels":
            ones = [1] * (int(args[1]) - 1)
            return b.method("reshape", self.emit(args[0], meta), -1, *ones)
        if name == "T.zeros_out":
            w = self.emit(args[0], meta)
            return b.method("new_zeros", w, b.method("size", w, 0))
        if name == "T.extent":
            return self._extent(args[0], int(args[1]))
        if name == "T.opaque":
            return self._opaque(int(args[0]), args[1], meta)
        raise EmitError(f"no emitter for {name}")

    def _opaque(self, index: int, arguments: Any, meta: bool) -> Any:
        """The leaf's call again, on its arguments' new forms (the node itself when none
        changed and nothing writes it later)."""
        node = self.low.leaves[index]
        if meta:
            raise EmitError("an op no rule knows is not run on the meta device")
        new = []
        while parts(arguments)[0] == "T.cons":
            head, arguments = parts(arguments)[1]
            new.append(self.emit(head))
        old = fx_tensor_arguments(node)
        if len(new) != len(old) or not all(isinstance(v, torch.fx.Node) for v in new):
            raise EmitError(f"{node.name}'s arguments are not tensors")
        if new == old and node not in self.low.stale and self._readable(node):
            return node
        mapping: dict[Any, Any] = dict(zip(old, new, strict=True))
        return self.graph.node_copy(node, lambda n: self._remapped(n, mapping))

    def _remapped(self, value: Any, mapping: dict[Any, Any]) -> Any:
        """An argument of a copied call: a tensor's new form, and a size read off a tensor
        that has one read off the new form (x.view(x.size(0), -1) must not keep the old x)."""
        if value in mapping:
            return mapping[value]
        size_like = ops.op_name(value) in SIZE_READS or (
            isinstance(value, torch.fx.Node)
            and value.op == "call_function"
            and value.target is getattr
            and value.args[1:] == ("shape",)
        )
        if not size_like or not any(n in mapping for n in _reads(value)):
            return value
        mapping[value] = self.graph.node_copy(value, lambda n: self._remapped(n, mapping))
        return mapping[value]

    def _transposed(self, weight: Any, meta: bool) -> Any:
        """The addmm's second matrix, weightᵀ: the matrix itself where weight is one's
        transpose (as lowering writes addmm(b, x, M): a scaled linear map of Mᵀ)."""
        name, args = parts(weight)
        if name == "T.transpose" and {int(args[1]), int(args[2])} == {0, 1}:
            return self.emit(args[0], meta)
        return self.build.method("t", self.emit(weight, meta))

    def _extent(self, term: Any, dim: int) -> Any:
        """term.size(dim) at call time: off a leaf or an op kept as written (the rule
        size-from-source moved the size there where it could), else off the term computed
        on the meta device (no data is touched)."""
        name, args = parts(term)
        node = self.low.leaves[int(args[0])] if name in ("T.leaf", "T.opaque") else None
        if node is not None and not isinstance(node, str) and node not in self.low.stale:
            value = node if self._readable(node) else self.emit(term)
        else:
            try:
                value = self.emit(term, meta=True)
            except EmitError:
                value = self.emit(term)
        size = self.build.method("size", value, dim)
        self._scalars.add(size)
        return size

    def _readable(self, value: Any) -> bool:
        """Computed before the op being written for (new nodes always are)."""
        if self.before is None or not isinstance(value, torch.fx.Node):
            return True
        return self._order.get(value, -1) < self._order[self.before]

    def _leaf(self, index: int, meta: bool) -> Any:
        node = self.low.leaves[index]
        if node in self.low.stale:
            raise EmitError(f"{node.name} is written in place before the new code would read it")
        if not self._readable(node):
            raise EmitError(f"{node.name} is computed after the op its value is written for")
        if isinstance(node, str):
            node = self._attribute(node)
        if not meta:
            return node
        if node.op not in ("placeholder", "get_attr"):
            raise EmitError("a computed value cannot be read on the meta device")
        return self.build.method("to", node, "meta")

    def _attribute(self, target: str) -> Any:
        for node in self.graph.nodes:
            if node.op == "get_attr" and node.target == target:
                return node
        first = next(n for n in self.graph.nodes if n.op != "placeholder")
        with self.graph.inserting_before(first):
            return self.graph.get_attr(target)

    def _binary(self, op: str, a: Any, b: Any) -> Any:
        if op in SCALAR_BINARY and (not isinstance(a, torch.fx.Node) or a in self._scalars):
            if not isinstance(b, torch.fx.Node) and not isinstance(a, torch.fx.Node):
                return SCALAR_BINARY[op](a, b)  # two constants
            node = self.build.call(SCALAR_BINARY[op], a, b)
            if not isinstance(b, torch.fx.Node) or b in self._scalars:
                self._scalars.add(node)
            return node
        if op in ("maximum", "minimum") and not isinstance(b, torch.fx.Node):
            bound = {"min": b} if op == "maximum" else {"max": b}
            return self.build.call(torch.clamp, a, **bound)
        if op in ("maximum", "minimum") and not isinstance(a, torch.fx.Node):
            bound = {"min": a} if op == "maximum" else {"max": a}
            return self.build.call(torch.clamp, b, **bound)
        return self.build.call(BINARY[op], a, b)

    def _full(self, value: float, source: Any, meta: bool) -> Any:
        """torch.full_like of the source's meta twin, on the inputs' device."""
        try:
            like = self.emit(source, meta=True)
        except EmitError:
            like = None
        if meta:
            return like if like is not None else self.emit(source, True)
        if like is None:  # the source must be computed for real: still correct, no saving
            return self.build.call(torch.full_like, self.emit(source), value)
        device = self._device()
        return self.build.call(torch.full_like, like, value, device=device)

    def _device(self) -> Any:
        if not self.low.inputs:
            raise EmitError("no tensor input to take the device from")
        return self.build.call(getattr, self.low.inputs[0], "device")
