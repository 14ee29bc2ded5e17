"""Which GEMM an fx node computes, for the triton-gemm pass: its operands, bias, scale
factors and the operand layout ("form") the generated launcher reads.

Every fp32 GEMM spelling in forward is read here: nn.Linear, F.linear, matmul / `@`, mm, bmm,
addmm and baddbmm (with their beta and alpha), and torch.matmul nodes that
triton_gemm_einsum wrote for an einsum. A node that is a GEMM the kernel cannot take gives a
one-line reason; a node that is no GEMM gives None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
import torch.nn as nn

from agents.offline.fx import ops

Node = torch.fx.Node
FP32 = torch.float32
LABEL = "tgemm_label"
"""node.meta key: how the summary names a GEMM another spelling was lowered to (einsum)."""


@dataclass(frozen=True)
class Attr:
    """A module attribute the generated call reads: a parameter (`linear.weight`, value None)
    or a number set in a submodule's constructor (`act.negative_slope`), read at call time."""

    path: str
    value: float | None = None


@dataclass(frozen=True)
class Gemm:
    """alpha * (a @ b) + beta * bias, as read from one node."""

    node: Node
    form: str  # "linear" (b is an (N, K) weight) | "matmul" (b is (K, N)) | "batched"
    a: Node
    b: Node | Attr
    bias: Node | Attr | None
    label: str  # "self.linear", "addmm", "einsum('bij,bjk->bik')"
    kind: str  # the op's name in memory/tuning.py's signature
    alpha: float = 1.0
    beta: float = 1.0


_SIGNATURES = {
    "linear": ("input", "weight", "bias"),
    "matmul": ("input", "other"),
    "mm": ("input", "mat2"),
    "bmm": ("input", "mat2"),
    "addmm": ("input", "mat1", "mat2", "beta", "alpha"),
    "baddbmm": ("input", "batch1", "batch2", "beta", "alpha"),
}
_SCALED = ("addmm", "baddbmm")


def read_gemm(gm: torch.fx.GraphModule, node: Node) -> Gemm | str | None:
    """The GEMM `node` computes; a reason when it is one the kernel cannot take; None when
    it is no GEMM."""
    module = ops.call_module(gm, node)
    if isinstance(module, nn.Linear):
        if type(module).forward is not nn.Linear.forward or len(node.args) != 1 or node.kwargs:
            return f"{node.name}: a Linear subclass or call the pass cannot read"
        weight = Attr(f"{node.target}.weight")
        bias = Attr(f"{node.target}.bias") if module.bias is not None else None
        label = f"self.{node.target}"
        gemm = Gemm(node, "linear", node.args[0], weight, bias, label, "linear")
        dtypes = {module.weight.dtype, ops.tensor_dtype(node.args[0]), ops.tensor_dtype(node)}
        if module.bias is not None:
            dtypes.add(module.bias.dtype)
        return _shapes(gemm, tuple(module.weight.shape), dtypes)
    name = ops.op_name(node)
    if name not in _SIGNATURES:
        return None
    args = ops.arguments(node, _SIGNATURES[name])
    if args is None or set(args) - set(_SIGNATURES[name]):
        return f"{node.name}: {name} called with arguments the pass does not read"
    alpha, beta = args.get("alpha", 1), args.get("beta", 1)
    if not (ops.is_scalar(alpha) and ops.is_scalar(beta)):
        return f"{node.name}: {name} with a beta or alpha computed in forward"
    if name in _SCALED:
        a, b = args.get("mat1", args.get("batch1")), args.get("mat2", args.get("batch2"))
        bias = args.get("input")
    else:
        a = args.get("input")
        b = args.get("weight", args.get("other", args.get("mat2")))
        bias = args.get("bias")
    if not isinstance(a, Node) or not isinstance(b, Node):
        return f"{node.name}: {name} of a constant"
    if bias is not None and not isinstance(bias, Node):
        return f"{node.name}: {name} with a constant bias"
    shape_b = ops.tensor_shape(b)
    if shape_b is None:
        return f"{node.name}: {name} operand of unknown shape"
    form = "linear" if name == "linear" else "matmul"
    label = str(node.meta.get(LABEL, name))
    kind = label.split("(")[0]
    gemm = Gemm(node, form, a, b, bias, label, kind, float(alpha), float(beta))
    dtypes = {ops.tensor_dtype(a), ops.tensor_dtype(b), ops.tensor_dtype(node)}
    if bias is not None:
        dtypes.add(ops.tensor_dtype(bias))
    return _shapes(gemm, shape_b, dtypes)


def _shapes(gemm: Gemm, shape_b: tuple[int, ...], dtypes: set[Any]) -> Gemm | str:
    """The form the generated code uses for these ranks; a reason when none fits. Batch dims
    that broadcast (a (1, K, N) or (K, N)-by-batch operand) are read as stride-0 views."""
    name = gemm.node.name
    if dtypes != {FP32}:
        kinds = ", ".join(sorted(str(d).replace("torch.", "") for d in dtypes))
        return f"{name}: a {kinds} GEMM; the kernel is for fp32 (3xTF32 is an fp32 scheme)"
    shape_a = ops.tensor_shape(gemm.a)
    out = ops.tensor_shape(gemm.node)
    if shape_a is None or out is None or not shape_a:
        return f"{name}: operand of unknown shape"
    if gemm.form == "linear":
        ok = len(shape_b) == 2 and shape_a[-1] == shape_b[1]
        return gemm if ok else f"{name}: linear with a weight of shape {shape_b}"
    if len(shape_a) < 2 or len(shape_b) < 2:
        return f"{name}: a matrix-vector product (1-D operand), not a GEMM"
    if len(shape_b) == 2:
        return gemm
    try:
        torch.broadcast_shapes(shape_a[:-2], shape_b[:-2])
    except RuntimeError:
        return f"{name}: batch dims {shape_a[:-2]} and {shape_b[:-2]} do not broadcast"
    return Gemm(
        gemm.node,
        "batched",
        gemm.a,
        gemm.b,
        gemm.bias,
        gemm.label,
        gemm.kind,
        gemm.alpha,
        gemm.beta,
    )


def gemm_sizes(gemm_a: Node, gemm_out: Node, form: str) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of a site from its traced shapes: a "matmul" folds a's leading dims
    into M; a "batched" GEMM's batch is the product of the output's leading dims."""
    shape_a, out = ops.tensor_shape(gemm_a), ops.tensor_shape(gemm_out)
    if not shape_a or not out:
        return None
    if form == "batched":
        batch = 1
        for size in out[:-2]:
            batch *= size
        return batch, shape_a[-2], out[-1], shape_a[-1]
    rows = 1
    for size in shape_a[:-1]:
        rows *= size
    return 1, rows, out[-1], shape_a[-1]
