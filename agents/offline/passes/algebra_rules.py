"""Graph patterns the size-1 reduction pass matches: dims that are 1 by construction, the
reductions over them, and pooling with single-element windows."""

from __future__ import annotations

import builtins
import operator
from typing import Any

import torch
import torch.fx
import torch.nn as nn

from agents.offline.fx import ops

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
        name = ops.op_name(node)
        part = tuple_part(node)
        if part is not None and ops.op_name(node.args[0]) in _ARG_REDUCTIONS:
            return self._reduced(node.args[0])
        shape = ops.tensor_shape(node)
        if shape is None:
            return frozenset()
        found = self._rule(node, name, len(shape))
        return frozenset(d for d in found if 0 <= d < len(shape) and shape[d] == 1)

    def _rule(self, node: Node, name: str | None, rank: int) -> frozenset[int]:
        first = node.args[0] if node.args else None
        module = ops.call_module(self.gm, node)
        if name in REDUCTIONS | _ARG_REDUCTIONS:
            return self._reduced(node)
        if name in _ELEMENTWISE or isinstance(module, _SHAPE_MODULES):
            return self(first)
        if name in _BINARY:
            return self._broadcast(node, rank)
        if name == "unsqueeze":
            dim = (ops.arguments(node) or {}).get("dim")
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
        weight_shape = ops.tensor_shape(args[1])
        x_shape = ops.tensor_shape(args[0])
        if weight_shape is None or x_shape is None or len(weight_shape) != 2 or rank < 1:
            return frozenset()
        out_dim = 0 if name == "linear" else 1
        units = {d + rank - len(x_shape) for d in self(args[0]) if d < len(x_shape) - 1}
        if out_dim in self(args[1]):
            units.add(rank - 1)
        return frozenset(units)

    def _reduced(self, node: Node) -> frozenset[int]:
        args = ops.arguments(node)
        x = args.get("input") if args else None
        shape = ops.tensor_shape(x)
        if not args or shape is None or args.get("dim") is None:
            return frozenset()
        dims = ops.dims_of(args["dim"], len(shape))
        if dims is None:
            return frozenset()
        before = self(x)
        if args.get("keepdim", False):
            return before | frozenset(dims)
        return frozenset(d - sum(r < d for r in dims) for d in before if d not in dims)

    def _broadcast(self, node: Node, rank: int) -> frozenset[int]:
        operands = [a for a in node.args[:2] if isinstance(a, Node)]
        shapes = [ops.tensor_shape(a) for a in operands]
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
    args = ops.arguments(node)
    x = args.get("input") if args else None
    shape = ops.tensor_shape(x)
    if not args or set(args) - {"input", "dim", "keepdim"} or shape is None:
        return None
    if args.get("dim") is None or not isinstance(args.get("keepdim", False), bool):
        return None
    dims = ops.dims_of(args["dim"], len(shape))
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
    module = ops.call_module(gm, node)
    name = ops.op_name(node) or ""
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
        params = ops.arguments(node, _POOL_SIGNATURES[kind]) or {}
        x = params.get("input")
    shape = ops.tensor_shape(x)
    if shape is None or shape != ops.tensor_shape(node) or params.get("return_indices"):
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
