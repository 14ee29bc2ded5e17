"""Which GEMMs the triton-gemm pass takes, and the epilogue it fuses into each.

A site is one fp32 GEMM (triton_gemm_read: nn.Linear, F.linear, matmul / mm / bmm, addmm,
baddbmm, a GEMM einsum) and the largest chain
of ops after it that one kernel can finish before its single store: elementwise ops on the
accumulator tile (bias, scale, activations, clamp, a residual tensor broadcast to the output)
and, when the output dim fits one tile, row reductions over it (softmax, log-softmax,
logsumexp, sum, mean, amax). The chain is a DAG over the GEMM's output (`y * sigmoid(y)` is
fine); every intermediate must be used only inside it, since the kernel stores one value.

The epilogue is written as `Step`s over numbered values (0 is the accumulator), which
triton_gemm_epilogue turns into Triton code. Nothing here looks at sizes beyond checking the
traced shapes: the generated code reads every size at call time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.fx
import torch.nn as nn

from agents.offline.fx import effects, ops, tracing
from agents.offline.passes.triton_gemm_read import FP32, Attr, Gemm, read_gemm

Node = torch.fx.Node

ROW_MAX_N = 256
"""Widest GEMM output dim a row reduction is fused for: the whole row must sit in one
(BLOCK_M, next_power_of_2(N)) tile, and past this the tile's B panel no longer fits shared
memory with pipelining (the reduction then stays a torch op after the kernel)."""


@dataclass(frozen=True)
class Ref:
    """An operand of an epilogue step: an earlier value (0 is the GEMM accumulator), the
    index of a tensor or scalar argument of the kernel, or a constant from the source."""

    kind: Literal["value", "tensor", "scalar", "const"]
    index: int = 0
    const: float = 0.0


@dataclass(frozen=True)
class Step:
    op: str  # add, relu, gelu, softmax, ... (triton_gemm_epilogue.OPS)
    args: tuple[Ref, ...]
    option: str = ""  # gelu's approximate
    row: bool = False  # one value per row (after a reduction over the GEMM's output dim)


@dataclass(frozen=True)
class Guard:
    """A module setting the kernel was written for (a softmax's dim, GELU's approximation):
    the generated call checks it, so other constructor arguments fail loudly."""

    path: str
    value: Any


@dataclass(frozen=True)
class Site:
    """One GEMM and the epilogue fused into its kernel, as the generated code needs them."""

    gemm: Node
    root: Node  # the node whose value the kernel returns
    region: tuple[Node, ...]  # the nodes the kernel replaces, in graph order
    form: str  # "linear" (b is an (N, K) weight) | "matmul" (b is (K, N)) | "batched"
    a: Node
    b: Node | Attr
    tensors: tuple[Node | Attr, ...]  # tensor arguments of the epilogue
    scalars: tuple[Node | Attr, ...]  # numbers read at call time
    steps: tuple[Step, ...]
    result: int  # the value the kernel stores
    rows: bool  # the result is one value per row
    keepdim: bool  # ... of shape (..., M, 1) rather than (..., M)
    guards: tuple[Guard, ...]
    what: str  # "self.linear → + bias → relu", for summaries and docstrings


# -- the epilogue ----------------------------------------------------------------------------

_UNARY = ("relu", "sigmoid", "tanh", "silu", "mish", "hardsigmoid", "hardswish", "neg")
_UNARY += ("abs", "exp", "square")
_SIGNATURES: dict[str, tuple[str, ...]] = {
    **{name: ("input", "other") for name in ("add", "sub", "mul", "div")},
    **{name: ("input", "inplace") for name in _UNARY},
    "gelu": ("input", "approximate"),
    "hardtanh": ("input", "min_val", "max_val", "inplace"),
    "relu6": ("input", "inplace"),
    "leaky_relu": ("input", "negative_slope", "inplace"),
    "softplus": ("input", "beta", "threshold"),
    "clamp": ("input", "min", "max"),
    "clip": ("input", "min", "max"),
    "clamp_min": ("input", "min"),
    "clamp_max": ("input", "max"),
    "pow": ("input", "exponent"),
    "softmax": ("input", "dim", "_stacklevel", "dtype"),
    "log_softmax": ("input", "dim", "_stacklevel", "dtype"),
    "logsumexp": ("input", "dim", "keepdim"),
    "sum": ("input", "dim", "keepdim", "dtype"),
    "mean": ("input", "dim", "keepdim", "dtype"),
    "amax": ("input", "dim", "keepdim"),
    "dropout": ("input", "p", "training", "inplace"),
}
ROW_OPS = ("softmax", "log_softmax", "logsumexp", "sum", "mean", "amax")
_KEEPS_ROW = ("softmax", "log_softmax")  # reduce over the row but return a tile


@dataclass
class _Proto:
    """One fusable node before numbering: its op, operands (nodes, Attrs, numbers)."""

    op: str
    operands: list[Any]
    option: str = ""
    row: bool = False
    keepdim: bool = False
    guards: list[Guard] = field(default_factory=list)


def _read(gm: torch.fx.GraphModule, node: Node) -> _Proto | None:
    """The op a node applies, as a fusable step; None when it is not one the kernel fuses."""
    module = ops.call_module(gm, node)
    if module is not None:
        return _module_op(module, str(node.target), node)
    name = ops.op_name(node)
    if name == "clip":
        name = "clamp"
    signature = _SIGNATURES.get(name or "")
    args = ops.arguments(node, signature) if signature else None
    if args is None or set(args) - set(signature or ()):
        return None
    x = args.get("input")
    if name in ("add", "sub", "mul", "div"):
        return _Proto(name, [x, args.get("other")]) if "other" in args else None
    if name in _UNARY:
        return _Proto(name, [x])
    if name == "gelu":
        approximate = args.get("approximate", "none")
        return _Proto("gelu", [x], option=approximate) if approximate in ("none", "tanh") else None
    if name in ("hardtanh", "relu6"):
        low, high = (args.get("min_val", -1.0), args.get("max_val", 1.0))
        return _Proto("clamp", [x, *((0.0, 6.0) if name == "relu6" else (low, high))])
    if name in ("clamp", "clamp_min", "clamp_max"):
        low, high = args.get("min"), args.get("max")
        if low is None and high is None:
            return None
        if high is None:
            return _Proto("clamp_min", [x, low])
        return _Proto("clamp", [x, -math.inf if low is None else low, high])
    if name == "leaky_relu":
        return _Proto("leaky_relu", [x, args.get("negative_slope", 0.01)])
    if name == "softplus":
        return _Proto("softplus", [x, args.get("beta", 1.0), args.get("threshold", 20.0)])
    if name == "pow":
        exponent = args.get("exponent")
        return _Proto("square", [x]) if ops.is_scalar(exponent) and exponent == 2 else None
    if name == "dropout":
        identity = args.get("p", 0.5) == 0 or args.get("training", True) is False
        return _Proto("identity", [x]) if identity else None
    return _row_op(name or "", args)


def _row_op(name: str, args: dict[str, Any]) -> _Proto | None:
    if name not in ROW_OPS or args.get("dtype") is not None:
        return None
    shape = ops.tensor_shape(args.get("input"))
    if not shape or ops.dims_of(args.get("dim"), len(shape)) != (len(shape) - 1,):
        return None  # only a reduction over the GEMM's output dim stays inside one row
    keepdim = args.get("keepdim", False)
    if not isinstance(keepdim, bool):
        return None
    return _Proto(name, [args["input"]], row=name not in _KEEPS_ROW, keepdim=keepdim)


def _module_op(module: nn.Module, path: str, node: Node) -> _Proto | None:
    """Activation modules; their numeric settings are read from the module at call time."""
    if len(node.args) != 1 or node.kwargs:
        return None
    x = node.args[0]
    kinds = {
        nn.ReLU: "relu",
        nn.Sigmoid: "sigmoid",
        nn.Tanh: "tanh",
        nn.SiLU: "silu",
        nn.Mish: "mish",
        nn.Hardsigmoid: "hardsigmoid",
        nn.Hardswish: "hardswish",
        nn.Identity: "identity",
    }
    if type(module) in kinds:
        return _Proto(kinds[type(module)], [x])
    if type(module) in (nn.Hardtanh, nn.ReLU6):
        low, high = Attr(f"{path}.min_val", module.min_val), Attr(f"{path}.max_val", module.max_val)
        return _Proto("clamp", [x, low, high])
    if type(module) is nn.LeakyReLU:
        return _Proto("leaky_relu", [x, Attr(f"{path}.negative_slope", module.negative_slope)])
    if type(module) is nn.Softplus:
        beta = Attr(f"{path}.beta", module.beta)
        return _Proto("softplus", [x, beta, Attr(f"{path}.threshold", module.threshold)])
    if type(module) is nn.GELU and module.approximate in ("none", "tanh"):
        guard = Guard(f"{path}.approximate", module.approximate)
        return _Proto("gelu", [x], option=module.approximate, guards=[guard])
    if type(module) is nn.Dropout and module.p == 0:
        return _Proto("identity", [x], guards=[Guard(f"{path}.p", module.p)])
    if type(module) in (nn.Softmax, nn.LogSoftmax) and isinstance(module.dim, int):
        name = "softmax" if type(module) is nn.Softmax else "log_softmax"
        found = _row_op(name, {"input": x, "dim": module.dim})
        if found is not None:
            found.guards.append(Guard(f"{path}.dim", module.dim))
        return found
    return None


def _private_inplace(gm: torch.fx.GraphModule, node: Node) -> bool:
    """An in-place op is fused only when it writes a value nothing else reads."""
    if not effects.is_mutating(gm, node):
        return True
    target = node.args[0] if node.args else None
    return isinstance(target, Node) and set(target.users) == {node}


# -- growing and choosing the region -----------------------------------------------------------


def site_at(gm: torch.fx.GraphModule, node: Node) -> Site | str | None:
    """The site whose GEMM is `node`; why it is left alone; None when `node` is no GEMM."""
    gemm = read_gemm(gm, node)
    if gemm is None or isinstance(gemm, str):
        return gemm
    return _site(gm, gemm)


def _site(gm: torch.fx.GraphModule, gemm: Gemm) -> Site | str:
    shape = ops.tensor_shape(gemm.node)
    assert shape is not None
    protos = _grow(gm, gemm, shape)
    root = _choose_root(gemm.node, protos)
    if root is gemm.node and any(user in protos for user in gemm.node.users):
        users = ", ".join(sorted(u.name for u in gemm.node.users))
        return (
            f"{gemm.node.name}: its output feeds {users}; one kernel stores one value, so the "
            "epilogue cannot be fused (it branches, or is also needed outside the kernel)"
        )
    region = _ancestors(root, protos) | {gemm.node}
    ordered = tuple(n for n in gm.graph.nodes if n in region)
    return _number(gemm, root, ordered, protos)


def _grow(gm: torch.fx.GraphModule, gemm: Gemm, shape: tuple[int, ...]) -> dict[Node, _Proto]:
    """Every node after the GEMM that applies a fusable op to values computed inside (all
    of whose other operands come from outside the GEMM's descendants)."""
    after = _descendants(gemm.node)
    inside: dict[Node, str] = {gemm.node: "tile"}
    protos: dict[Node, _Proto] = {}
    rows_ok = shape[-1] <= ROW_MAX_N
    for node in gm.graph.nodes:
        if node not in after or node is gemm.node:
            continue
        proto = _read(gm, node)
        if proto is None:
            continue
        if effects.is_mutating(gm, node):
            if not _private_inplace(gm, node):
                continue
        elif effects.has_effects(gm, node):
            continue
        kind = _kind(proto, node, inside, after, shape, rows_ok)
        if kind is not None:
            inside[node] = kind
            proto.row = kind == "row"
            protos[node] = proto
    return protos


def _kind(
    proto: _Proto,
    node: Node,
    inside: dict[Node, str],
    after: set[Node],
    shape: tuple[int, ...],
    rows_ok: bool,
) -> str | None:
    """What the kernel holds for `node`: "tile" (BLOCK_M x BLOCK_N values) or "row" (one per
    row, after a reduction over N); None when the kernel cannot compute it."""
    if ops.tensor_dtype(node) != FP32:
        return None
    values = [v for v in proto.operands if isinstance(v, Node) and v in inside]
    escaped = [v for v in proto.operands if isinstance(v, Node) and v in after and v not in inside]
    if not values or escaped:
        return None  # no epilogue input, or one computed from the GEMM outside the epilogue
    out = ops.tensor_shape(node)
    keep_shape = (*shape[:-1], 1)
    if proto.op in ROW_OPS:
        if not rows_ok or inside.get(proto.operands[0]) != "tile":
            return None
        if proto.op in _KEEPS_ROW:
            return "tile" if out == shape else None
        return "row" if out == (keep_shape if proto.keepdim else shape[:-1]) else None
    tiles = [v for v in values if inside[v] == "tile"]
    rows = [v for v in values if inside[v] == "row"]
    if tiles:
        if out != shape or any(ops.tensor_shape(v) != keep_shape for v in rows):
            return None
        kind = "tile"
    else:
        if out not in (keep_shape, shape[:-1]) or any(ops.tensor_shape(v) != out for v in rows):
            return None
        kind = "row"
    for operand in proto.operands:
        if not _operand_ok(operand, inside, kind, shape):
            return None
    return kind


def _operand_ok(value: Any, inside: dict[Node, str], kind: str, shape: tuple[int, ...]) -> bool:
    if isinstance(value, Attr) or (ops.is_scalar(value) and not isinstance(value, bool)):
        return True
    if not isinstance(value, Node):
        return False
    if value in inside:
        return True
    meta = ops.tensor_meta(value)
    if meta is None:  # a Python number computed in forward (a size, self.scale)
        return "tensor_meta" not in value.meta and value.meta.get("type") in (int, float)
    if kind != "tile" or meta.dtype != FP32:
        return False
    try:
        return tuple(torch.broadcast_shapes(tuple(meta.shape), shape)) == shape
    except RuntimeError:
        return False


def _descendants(node: Node) -> set[Node]:
    seen, stack = {node}, [node]
    while stack:
        for user in stack.pop().users:
            if user not in seen:
                seen.add(user)
                stack.append(user)
    return seen


def _ancestors(root: Node, protos: dict[Node, _Proto]) -> set[Node]:
    """root and the epilogue nodes it is computed from."""
    seen, stack = {root}, [root]
    while stack:
        proto = protos.get(stack.pop())
        for value in proto.operands if proto else ():
            if isinstance(value, Node) and value in protos and value not in seen:
                seen.add(value)
                stack.append(value)
    return seen


def _choose_root(gemm: Node, protos: dict[Node, _Proto]) -> Node:
    """The epilogue node with the largest region whose intermediates are used only inside
    it (the GEMM itself when none is)."""
    best, best_size = gemm, 1
    for node in reversed(list(protos)):
        region = _ancestors(node, protos) | {gemm}
        inner = region - {node}
        if len(region) > best_size and all(set(n.users) <= region for n in inner):
            best, best_size = node, len(region)
    return best


# -- numbering -------------------------------------------------------------------------------


def _number(gemm: Gemm, root: Node, region: tuple[Node, ...], protos: dict[Node, _Proto]) -> Site:
    values: dict[Node, int] = {}
    kinds: dict[int, bool] = {0: False}
    tensors: list[Node | Attr] = []
    scalars: list[Node | Attr] = []
    steps: list[Step] = []
    guards: list[Guard] = []
    names = [gemm.label]

    def ref(value: Any) -> Ref:
        if isinstance(value, Node) and value in values:
            return Ref("value", values[value])
        if (isinstance(value, Attr) and value.value is None) or (
            isinstance(value, Node) and ops.tensor_meta(value) is not None
        ):
            if value not in tensors:
                tensors.append(value)
            return Ref("tensor", tensors.index(value))
        if isinstance(value, Node | Attr):
            if value not in scalars:
                scalars.append(value)
            return Ref("scalar", scalars.index(value))
        return Ref("const", const=float(value))

    def add(step: Step) -> int:
        steps.append(step)
        kinds[len(steps)] = step.row
        return len(steps)

    current = 0
    if gemm.alpha != 1:
        current = add(Step("mul", (Ref("value", 0), Ref("const", const=gemm.alpha))))
        names.append(f"* {gemm.alpha!r}")
    if gemm.bias is not None:
        bias = ref(gemm.bias)  # passed even when beta is 0: the kernel reads what it replaces
        if gemm.beta != 1 and gemm.beta != 0:
            bias = Ref("value", add(Step("mul", (bias, Ref("const", const=gemm.beta)))))
        if gemm.beta != 0:  # beta 0: torch ignores the input, NaN and inf included
            current = add(Step("add", (Ref("value", current), bias)))
            names.append("+ bias" if gemm.beta == 1 else f"+ {gemm.beta!r} * bias")
    values[gemm.node] = current
    for node in region:
        proto = protos.get(node)
        if proto is None:
            continue
        guards.extend(proto.guards)
        if proto.op == "identity":
            values[node] = values[proto.operands[0]]
            continue
        refs = tuple(ref(v) for v in proto.operands)
        names.append(_describe(proto, values))
        values[node] = add(Step(proto.op, refs, option=proto.option, row=proto.row))
    result = values[root]
    rows = kinds[result]
    keepdim = rows and ops.tensor_shape(root) == (*(ops.tensor_shape(gemm.node) or ())[:-1], 1)
    return Site(
        gemm=gemm.node,
        root=root,
        region=region,
        form=gemm.form,
        a=gemm.a,
        b=gemm.b,
        tensors=tuple(tensors),
        scalars=tuple(scalars),
        steps=tuple(steps),
        result=result,
        rows=rows,
        keepdim=keepdim,
        guards=tuple(guards),
        what=" → ".join(names),
    )


_SIGNS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def _describe(proto: _Proto, values: dict[Node, int]) -> str:
    """`* self.scale`, `+ bias`, `gelu(tanh)`, `softmax`: one step, for docstrings."""
    others = [_label(v) for v in proto.operands[1:] if not (isinstance(v, Node) and v in values)]
    if proto.op in _SIGNS:
        first = proto.operands[0]
        if not (isinstance(first, Node) and first in values):
            if proto.op in ("add", "mul"):  # `x + y` reads as `+ x` after y
                return f"{_SIGNS[proto.op]} {_label(first)}"
            return f"{_label(first)} {_SIGNS[proto.op]} ·"  # `2 - y`, `t / y`
        return f"{_SIGNS[proto.op]} {others[0]}" if others else _SIGNS[proto.op]
    option = f"({proto.option})" if proto.option not in ("", "none") else ""
    return proto.op + option


def _label(value: Any) -> str:
    scalar = tracing.self_scalar(value)
    if scalar is not None:
        return f"self.{scalar.name}"
    if isinstance(value, Attr):
        return f"self.{value.path}"
    if isinstance(value, Node):
        return f"self.{value.target}" if value.op == "get_attr" else value.name
    return repr(value)
