"""Graph patterns the algebra passes match: dims that are 1 by construction, scalar and
per-channel elementwise steps, linear maps, and linear/conv producers with their weights."""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

from agents.offline import fxtools as fx

Node = torch.fx.Node

REDUCTIONS = frozenset({"sum", "mean", "amax", "amin", "logsumexp", "prod", "nansum"})
_ARG_REDUCTIONS = frozenset({"max", "min"})
_ELEMENTWISE = frozenset(
    {"relu", "gelu", "sigmoid", "tanh", "exp", "log", "abs", "neg", "sqrt", "rsqrt", "clamp"}
    | {"clip", "silu", "softplus", "leaky_relu", "elu", "hardtanh", "mish", "square", "erf"}
    | {"log1p", "expm1", "reciprocal", "sign", "floor", "ceil", "round", "relu6", "selu"}
    | {"hardswish", "hardsigmoid", "celu", "logsigmoid", "softmax", "log_softmax", "cumsum"}
    | {"cumprod", "dropout", "contiguous", "clone", "float", "to", "sin", "cos", "exp2"}
    | {"clamp_min", "clamp_max", "nan_to_num", "detach"}
)
_BINARY = frozenset({"add", "sub", "mul", "div", "maximum", "minimum", "pow", "rsub"})
_SHAPE_MODULES = (
    nn.ReLU
    | nn.GELU
    | nn.Sigmoid
    | nn.Tanh
    | nn.Dropout
    | nn.Identity
    | nn.SiLU
    | nn.ELU
    | nn.LeakyReLU
    | nn.Hardtanh
    | nn.Softplus
    | nn.Mish
    | nn.Softmax
    | nn.LogSoftmax
    | nn.Hardswish
    | nn.ReLU6
    | nn.Hardsigmoid
    | nn.SELU
    | nn.CELU
)


# -- dims that are 1 whatever the input sizes ------------------------------------------------


class UnitDims:
    """Which dims of a node are 1 by construction (a keepdim reduction, unsqueeze, a literal
    1 in view), not merely at the example sizes: `--size gpu` and users change sizes."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        self.memo: dict[Node, frozenset[int]] = {}

    def __call__(self, value: Any) -> frozenset[int]:
        if not isinstance(value, Node):
            return frozenset()
        if value not in self.memo:
            self.memo[value] = self._compute(value)
        return self.memo[value]

    def _compute(self, node: Node) -> frozenset[int]:
        name = fx.op_name(node)
        part = tuple_part(node)
        if part is not None and fx.op_name(node.args[0]) in _ARG_REDUCTIONS:
            return self._reduced(node.args[0])
        shape = fx.tensor_shape(node)
        if shape is None:
            return frozenset()
        found = self._rule(node, name, len(shape))
        return frozenset(d for d in found if 0 <= d < len(shape) and shape[d] == 1)

    def _rule(self, node: Node, name: str | None, rank: int) -> frozenset[int]:
        first = node.args[0] if node.args else None
        module = fx.call_module(self.gm, node)
        if name in REDUCTIONS | _ARG_REDUCTIONS:
            return self._reduced(node)
        if name in _ELEMENTWISE or isinstance(module, _SHAPE_MODULES):
            return self(first)
        if name in _BINARY:
            return self._broadcast(node, rank)
        if name == "unsqueeze":
            dim = (fx.arguments(node) or {}).get("dim")
            if not isinstance(dim, int) or isinstance(dim, bool):
                return frozenset()
            d = dim % rank
            return frozenset({u + (u >= d) for u in self(first)} | {d})
        if name in ("view", "reshape"):
            sizes = node.args[1:]
            if len(sizes) == 1 and isinstance(sizes[0], tuple | list):
                sizes = tuple(sizes[0])
            return frozenset(i for i, s in enumerate(sizes) if s == 1 and not isinstance(s, bool))
        if isinstance(module, nn.Linear):
            return self(first) - {rank - 1}
        if name in ("linear", "matmul", "mm", "addmm"):
            return self._linear(node, name, rank)
        return frozenset()

    def _linear(self, node: Node, name: str, rank: int) -> frozenset[int]:
        """Rows come from x, the last dim from the weight: W.sum(0, keepdim=True) gives 1."""
        if name == "addmm":
            return frozenset()
        args = node.args
        if len(args) < 2 or not isinstance(args[0], Node) or not isinstance(args[1], Node):
            return frozenset()
        weight_shape = fx.tensor_shape(args[1])
        x_shape = fx.tensor_shape(args[0])
        if weight_shape is None or x_shape is None or len(weight_shape) != 2 or rank < 1:
            return frozenset()
        out_dim = 0 if name == "linear" else 1
        units = {d + rank - len(x_shape) for d in self(args[0]) if d < len(x_shape) - 1}
        if out_dim in self(args[1]):
            units.add(rank - 1)
        return frozenset(units)

    def _reduced(self, node: Node) -> frozenset[int]:
        args = fx.arguments(node)
        x = args.get("input") if args else None
        shape = fx.tensor_shape(x)
        if not args or shape is None or args.get("dim") is None:
            return frozenset()
        dims = fx.dims_of(args["dim"], len(shape))
        if dims is None:
            return frozenset()
        before = self(x)
        if args.get("keepdim", False):
            return before | frozenset(dims)
        return frozenset(d - sum(r < d for r in dims) for d in before if d not in dims)

    def _broadcast(self, node: Node, rank: int) -> frozenset[int]:
        operands = [a for a in node.args[:2] if isinstance(a, Node)]
        shapes = [fx.tensor_shape(a) for a in operands]
        if not operands or any(s is None for s in shapes):
            return frozenset()
        result = set(range(rank))
        for operand, shape in zip(operands, shapes, strict=True):
            offset = rank - len(shape)
            units = self(operand)
            result -= {d + offset for d in range(len(shape)) if d not in units}
        return frozenset(result)


def tuple_part(node: Any) -> int | None:
    """0 or 1 when the node takes values/indices out of a (values, indices) result."""
    if not isinstance(node, Node) or node.op != "call_function" or len(node.args) != 2:
        return None
    key = node.args[1]
    if node.target is operator.getitem and key in (0, 1) and not isinstance(key, bool):
        return int(key)
    if node.target is builtins.getattr and key in ("values", "indices"):
        return 0 if key == "values" else 1
    return None


def unit_reduction(node: Node, units: UnitDims) -> tuple[Node, tuple[int, ...], bool] | None:
    """(input, dims, keepdim) when the node reduces only over dims that are always 1."""
    args = fx.arguments(node)
    x = args.get("input") if args else None
    shape = fx.tensor_shape(x)
    if not args or set(args) - {"input", "dim", "keepdim"} or shape is None:
        return None
    if args.get("dim") is None or not isinstance(args.get("keepdim", False), bool):
        return None
    dims = fx.dims_of(args["dim"], len(shape))
    if dims is None or not set(dims) <= units(x):
        return None
    return x, dims, bool(args.get("keepdim", False))


_POOL_MODULES = (
    nn.modules.pooling._AvgPoolNd
    | nn.modules.pooling._MaxPoolNd
    | nn.modules.pooling._AdaptiveAvgPoolNd
    | nn.modules.pooling._AdaptiveMaxPoolNd
)
_POOL_SIGNATURES = {
    "avg": ("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"),
    "max": ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode"),
    "adaptive": ("input", "output_size", "return_indices"),
}


def identity_pool(gm: torch.fx.GraphModule, node: Node, units: UnitDims) -> Node | None:
    """The input of a pooling op whose windows are single elements, else None."""
    module = fx.call_module(gm, node)
    name = fx.op_name(node) or ""
    if module is not None:
        if not isinstance(module, _POOL_MODULES):
            return None
        if len(node.args) != 1 or node.kwargs:
            return None
        x, params = node.args[0], dict(vars(module))
        name = type(module).__name__.lower().replace("pool", "_pool")
        name = name.replace("adaptiveavg", "adaptive_avg").replace("adaptivemax", "adaptive_max")
    else:
        kind = "adaptive" if name.startswith("adaptive_") else name[:3]
        if not name.endswith(("pool1d", "pool2d", "pool3d")) or kind not in _POOL_SIGNATURES:
            return None
        params = fx.arguments(node, _POOL_SIGNATURES[kind]) or {}
        x = params.get("input")
    shape = fx.tensor_shape(x)
    if shape is None or shape != fx.tensor_shape(node) or params.get("return_indices"):
        return None
    if params.get("divisor_override") is not None:
        return None
    if name.startswith("adaptive_"):
        spatial = int(name[-2])
        wanted = set(range(len(shape) - spatial, len(shape)))
        if not _all_equal(params.get("output_size"), 1, allow_none=True):
            return None
        return x if wanted <= units(x) else None
    stride = params.get("stride")
    if not _all_equal(params.get("kernel_size"), 1):
        return None
    if stride not in (None, [], ()) and not _all_equal(stride, 1):
        return None
    return x if _all_equal(params.get("padding", 0), 0) else None


def _all_equal(value: Any, wanted: int, *, allow_none: bool = False) -> bool:
    items = list(value) if isinstance(value, tuple | list) else [value]
    return bool(items) and all(v == wanted or (allow_none and v is None) for v in items)


# -- elementwise steps -----------------------------------------------------------------------


@dataclass
class Step:
    """One elementwise op applied to `source`: `source * const`, `const - source`, ..."""

    node: Node
    kind: str  # mul, div, add, sub, neg
    source: Node
    const: Any = None
    const_left: bool = False

    def describe(self) -> str:
        const = self.const.name if isinstance(self.const, Node) else repr(self.const)
        symbol = {"mul": "*", "div": "/", "add": "+", "sub": "-"}.get(self.kind)
        if symbol is None:
            return "negate"
        return f"{const} {symbol} ·" if self.const_left else f"{symbol} {const}"

    def replay(self, build: fx.Builder, out: Node, size: Any) -> Node:
        """This step on a reduced value: a shift is summed `size` times (None: a mean)."""
        if self.kind == "neg":
            return build.call(operator.neg, out)
        if self.kind in ("mul", "div"):
            target = operator.mul if self.kind == "mul" else operator.truediv
            args = (self.const, out) if self.const_left else (out, self.const)
            return build.call(target, *args)
        offset = self.const if size is None else build.mul(self.const, size)
        target = operator.add if self.kind == "add" else operator.sub
        return build.call(target, *((offset, out) if self.const_left else (out, offset)))


def _step(node: Node, allowed: Callable[[Any], bool]) -> Step | None:
    name = fx.op_name(node)
    if name not in ("mul", "div", "add", "sub", "neg") or node.kwargs:
        return None
    if name == "neg":
        source = node.args[0] if len(node.args) == 1 else None
        step = Step(node, "neg", source) if isinstance(source, Node) else None
    elif len(node.args) != 2:
        return None
    elif isinstance(node.args[0], Node) and allowed(node.args[1]):
        step = Step(node, name, node.args[0], node.args[1])
    elif name != "div" and isinstance(node.args[1], Node) and allowed(node.args[0]):
        step = Step(node, name, node.args[1], node.args[0], const_left=True)
    else:
        return None
    if step is None or fx.tensor_shape(node) != fx.tensor_shape(step.source):
        return None
    return step if fx.tensor_dtype(node) == fx.tensor_dtype(step.source) else None


def scalar_step(node: Node) -> Step | None:
    """The node as an op with a finite Python number (or a negation)."""
    return _step(node, lambda c: fx.is_scalar(c) and math.isfinite(c))


def affine_chain(node: Node, channel_axis: int) -> list[Step]:
    """The single-use scale/shift ops right after `node`, by scalars or by per-channel
    parameters/buffers (constant along every dim but the channel axis)."""
    shape, dtype = fx.tensor_shape(node), fx.tensor_dtype(node)
    if shape is None:
        return []
    axis = channel_axis % len(shape)

    def allowed(c: Any) -> bool:
        if fx.is_scalar(c):
            return math.isfinite(c)
        const = fx.tensor_shape(c)
        if not isinstance(c, Node) or c.op != "get_attr" or const is None:
            return False
        if fx.tensor_dtype(c) != dtype or len(const) > len(shape):
            return False
        offset = len(shape) - len(const)
        return all(
            size == 1 or (j + offset == axis and size == shape[axis])
            for j, size in enumerate(const)
        )

    steps: list[Step] = []
    current = node
    while len(current.users) == 1:
        step = _step(next(iter(current.users)), allowed)
        if step is None or step.source is not current:
            break
        steps.append(step)
        current = step.node
    return steps


# -- linear maps and their weights -----------------------------------------------------------


def _ref(build: fx.Builder, value: Node | str | None) -> Node | None:
    return build.attr(value) if isinstance(value, str) else value


def _transposed(node: Any) -> Node | None:
    """W when `node` is W.T / W.t() / W.transpose(0, 1) of a 2-D W."""
    if not isinstance(node, Node) or not node.args or len(fx.tensor_shape(node) or ()) != 2:
        return None
    source = node.args[0]
    name = fx.op_name(node)
    if node.op == "call_function" and node.target is builtins.getattr:
        name = node.args[1] if node.args[1] in ("T", "mT") else None
    elif name in ("transpose", "swapaxes", "swapdims"):
        dims = fx.dims_of(tuple(node.args[1:]), 2) if len(node.args) == 3 else None
        name = "t" if dims == (0, 1) else None
    elif name == "permute":
        order = node.args[1] if len(node.args) == 2 else tuple(node.args[1:])
        name = "t" if tuple(order) in ((1, 0), (-1, -2), (1, -2), (-1, 0)) else None
    if name not in ("t", "T", "mT") or len(fx.tensor_shape(source) or ()) != 2:
        return None
    return source


@dataclass
class LinearMap:
    """y = x W^T + b ("linear"), x M ("matmul") or beta b + alpha x M ("addmm"); W or M
    is known."""

    kind: str
    x: Node
    weight: Node | str | None  # (out, in), a node or a get_attr target
    matrix: Node | None  # (in, out)
    bias: Node | str | None
    label: str
    scales: dict[str, Any] = field(default_factory=dict)  # addmm's beta and alpha

    def resolve(self, build: fx.Builder) -> tuple[Node | None, Node | None]:
        return _ref(build, self.weight), self.matrix

    def resolve_bias(self, build: fx.Builder) -> Node | None:
        return _ref(build, self.bias)


_ADDMM_ARGS = frozenset({"input", "mat1", "mat2", "beta", "alpha"})


def linear_map(gm: torch.fx.GraphModule, node: Node) -> LinearMap | None:
    module = fx.call_module(gm, node)
    if isinstance(module, nn.Linear):
        if len(node.args) != 1 or node.kwargs or not isinstance(node.args[0], Node):
            return None
        bias = f"{node.target}.bias" if module.bias is not None else None
        label = f"self.{node.target}"
        return LinearMap("linear", node.args[0], f"{node.target}.weight", None, bias, label)
    name = fx.op_name(node)
    names = {"linear": ("input", "weight", "bias"), "addmm": ("input", "mat1", "mat2")}
    args = fx.arguments(node, names.get(name or "", ("input", "other")))
    if not args:
        return None
    if name == "linear" and not set(args) - {"input", "weight", "bias"}:
        x, weight, bias = args.get("input"), args.get("weight"), args.get("bias")
        if isinstance(x, Node) and isinstance(weight, Node) and isinstance(bias, Node | None):
            return LinearMap("linear", x, weight, None, bias, "F.linear")
        return None
    if name in ("matmul", "mm") and set(args) == {"input", "other"}:
        x, matrix, bias, kind = args["input"], args["other"], None, "matmul"
    elif name == "addmm" and {"input", "mat1", "mat2"} <= set(args) <= _ADDMM_ARGS:
        x, matrix, bias, kind = args["mat1"], args["mat2"], args["input"], "addmm"
    else:
        return None
    scales = {k: args[k] for k in ("beta", "alpha") if k in args}
    if not all(fx.is_scalar(v) for v in scales.values()):
        return None
    if not isinstance(x, Node) or not fx.tensor_shape(x) or len(fx.tensor_shape(matrix) or ()) != 2:
        return None
    if kind == "addmm" and not isinstance(bias, Node):
        return None
    weight = _transposed(matrix)
    if weight is not None:
        kind = "linear" if kind == "matmul" else kind
        return LinearMap(kind, x, weight, None, bias, name, scales)
    return LinearMap(kind, x, None, matrix, bias, name, scales)


@dataclass
class Producer:
    """A linear or conv whose output a scale/shift follows."""

    kind: str  # "linear" | "conv"
    node: Node
    x: Node
    weight: Node | str
    bias: Node | str | None
    label: str
    conv: Callable[..., Any] | None = None
    conv_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def channel_axis(self) -> int:
        return -1 if self.kind == "linear" else 1

    @property
    def x_rank(self) -> int:
        return len(fx.tensor_shape(self.x) or ())

    def _weight_value(self, gm: torch.fx.GraphModule) -> tuple[int, int]:
        if isinstance(self.weight, str):
            tensor = gm.get_parameter(self.weight)
            return tensor.numel(), tensor.dim()
        shape = fx.tensor_shape(self.weight) or ()
        return math.prod(shape), len(shape)

    def weight_numel(self, gm: torch.fx.GraphModule) -> int:
        return self._weight_value(gm)[0]

    def weight_rank(self, gm: torch.fx.GraphModule) -> int:
        return self._weight_value(gm)[1]

    def out_numel(self) -> int:
        return math.prod(fx.tensor_shape(self.node) or ())

    def resolve_weight(self, build: fx.Builder) -> Node:
        weight = _ref(build, self.weight)
        assert weight is not None
        return weight

    def resolve_bias(self, build: fx.Builder) -> Node | None:
        return _ref(build, self.bias)

    def call(self, build: fx.Builder, weight: Any, bias: Any) -> Node:
        extra = () if bias is None else (bias,)
        if self.kind == "linear":
            return build.call(F.linear, self.x, weight, *extra)
        assert self.conv is not None
        return build.call(self.conv, self.x, weight, bias, **self.conv_kwargs)


_CONV_MODULES: dict[type, Callable[..., Any]] = {
    nn.Conv1d: F.conv1d,
    nn.Conv2d: F.conv2d,
    nn.Conv3d: F.conv3d,
}
_CONV_ARGS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")


def producer(gm: torch.fx.GraphModule, node: Node) -> Producer | None:
    """The node as nn.Linear / F.linear / x @ W.T / nn.ConvNd / F.convNd, else None."""
    module = fx.call_module(gm, node)
    if type(module) in _CONV_MODULES:
        if len(node.args) != 1 or node.kwargs or module.padding_mode != "zeros":
            return None
        kwargs = {k: getattr(module, k) for k in ("stride", "padding", "dilation", "groups")}
        bias = f"{node.target}.bias" if module.bias is not None else None
        return Producer(
            "conv",
            node,
            node.args[0],
            f"{node.target}.weight",
            bias,
            f"self.{node.target}",
            _CONV_MODULES[type(module)],
            kwargs,
        )
    name = fx.op_name(node)
    if name in ("conv1d", "conv2d", "conv3d") and node.op == "call_function":
        args = fx.arguments(node, _CONV_ARGS)
        if not args or not isinstance(args.get("input"), Node):
            return None
        if not isinstance(args.get("weight"), Node) or not isinstance(
            args.get("bias"), Node | None
        ):
            return None
        kwargs = {k: v for k, v in args.items() if k in _CONV_ARGS[3:]}
        return Producer(
            "conv",
            node,
            args["input"],
            args["weight"],
            args.get("bias"),
            f"F.{name}",
            getattr(F, name),
            kwargs,
        )
    linear = linear_map(gm, node)
    if linear is None or linear.kind != "linear" or linear.weight is None:
        return None
    return Producer("linear", node, linear.x, linear.weight, linear.bias, linear.label)
