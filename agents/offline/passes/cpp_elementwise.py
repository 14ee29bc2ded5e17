"""Fuse the elementwise epilogue of a CPU forward into one C++/OpenMP loop.

A forward like `conv -> + bias -> * scale -> clamp` reads and writes the whole activation once
per op; the fused loop does it once. The pass traces the forward with fx, takes the largest
set of elementwise ops that ends at the output (a DAG over one activation: `x * sigmoid(x)`
is fine) and replaces it by a call into a `load_inline` extension; the ops before it stay as
they were, written back as generated code.

Operands of the fused ops are the activation(s) (same shape as the output), parameters or
tensors broadcast along one block of dims (a conv bias of shape (C, 1, 1), a linear bias of
shape (F,)), 1-element tensors, and Python scalars (passed at run time, so the kernel text,
and its build, does not depend on their values). Numerics follow PyTorch's CPU kernels op by
op in fp32 with the same operation order (gelu through erf); no -ffast-math, and
-ffp-contract=off so the compiler does not fuse a multiply and an add into one rounding.
+, -, *, /, relu, clamp, leaky_relu, neg and abs are then bit-exact; exp, tanh, erf and
sigmoid use libm and can differ from PyTorch's vectorised versions in the last bit.

The extension is built on first use (a module-level cache), never at import: the reviewer
imports and builds instances before it calls one. The generated code is inference-only: the
extension has no backward.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from agents.offline.fx import codegen, effects, ops, tracing
from agents.offline.passes.base import PassError, Program, Rewrite

MIN_OPS = 2
"""One op alone gains nothing: PyTorch's own kernel already makes a single pass."""
CFLAGS = ["-O3", "-march=native", "-fopenmp", "-ffp-contract=off"]
METHOD = "_fused_epilogue"

# -- what can be fused -----------------------------------------------------------------------


@dataclass
class _Fused:
    operands: list[Any]  # fx nodes or Python scalars, in template order
    template: str  # C++ expression with {0}, {1}, ... for the operands


def _f(value: float) -> str:
    """A float constant exactly as PyTorch's kernels round it: double, then cast to float."""
    return f"static_cast<float>({value!r})"


_GELU_TANH_BETA = "static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5)"
_UNARY = {
    "neg": "(-{0})",
    "abs": "std::fabs({0})",
    "exp": "std::exp({0})",
    "tanh": "std::tanh({0})",
    "relu": "std::max({0}, 0.0f)",
    "sigmoid": "(1.0f / (1.0f + std::exp(-{0})))",
    "silu": "({0} / (1.0f + std::exp(-{0})))",
}
_BINARY = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})"}
_NAN_EITHER = "(({0} != {0} || {1} != {1}) ? ({0} + {1}) : std::{op}({0}, {1}))"
_SIGNATURES = {
    **{name: ("input", "inplace") for name in _UNARY},
    **{name: ("input", "other") for name in (*_BINARY, "maximum", "minimum")},
    "clamp": ("input", "min", "max"),
    "clip": ("input", "min", "max"),
    "clamp_min": ("input", "min"),
    "clamp_max": ("input", "max"),
    "hardtanh": ("input", "min_val", "max_val", "inplace"),
    "relu6": ("input", "inplace"),
    "leaky_relu": ("input", "negative_slope", "inplace"),
    "gelu": ("input", "approximate"),
}


def _gelu(x: Any, approximate: str) -> _Fused | None:
    if approximate == "none":
        erf = f"std::erf({{0}} * {_f(math.sqrt(0.5))})"
        return _Fused([x], f"({{0}} * 0.5f * (1.0f + {erf}))")
    if approximate == "tanh":
        inner = f"{_GELU_TANH_BETA} * ({{0}} + {_f(0.044715)} * ({{0}} * {{0}} * {{0}}))"
        return _Fused([x], f"(0.5f * {{0}} * (1.0f + std::tanh({inner})))")
    return None


def _clamp(x: Any, low: Any, high: Any) -> _Fused | None:
    if low is None and high is None:
        return None
    if high is None:
        return _Fused([x, low], "std::max({0}, {1})")
    if low is None:
        return _Fused([x, high], "std::min({0}, {1})")
    return _Fused([x, low, high], "std::min(std::max({0}, {1}), {2})")


def _bound(name: str, args: dict[str, Any]) -> _Fused | None:
    """The fused form of op `name` with bound arguments, or None (not fusable as called)."""
    if args.get("inplace"):
        return None
    x = args.get("input")
    if name in _UNARY and args.keys() <= {"input", "inplace"}:
        return _Fused([x], _UNARY[name])
    if name in _BINARY and args.keys() == {"input", "other"}:
        return _Fused([x, args["other"]], _BINARY[name])
    if name in ("maximum", "minimum") and args.keys() == {"input", "other"}:
        return _Fused([x, args["other"]], _NAN_EITHER.replace("{op}", name[:3]))
    if name in ("clamp", "clip", "clamp_min", "clamp_max"):
        return _clamp(x, args.get("min"), args.get("max"))
    if name == "hardtanh":
        return _clamp(x, args.get("min_val", -1.0), args.get("max_val", 1.0))
    if name == "relu6":
        return _clamp(x, 0.0, 6.0)
    if name == "leaky_relu":
        return _Fused([x, args.get("negative_slope", 0.01)], "({0} > 0.0f ? {0} : {0} * {1})")
    if name == "gelu" and args.keys() <= {"input", "approximate"}:
        return _gelu(x, args.get("approximate", "none"))
    return None


def _module_op(module: torch.nn.Module, x: Any) -> _Fused | None:
    """Activation modules: their settings are constructor arguments, fixed per instance."""
    nn = torch.nn
    if getattr(module, "inplace", False):
        return None
    if isinstance(module, nn.ReLU6 | nn.Hardtanh):
        return _clamp(x, float(module.min_val), float(module.max_val))
    if isinstance(module, nn.LeakyReLU):
        return _bound("leaky_relu", {"input": x, "negative_slope": float(module.negative_slope)})
    if isinstance(module, nn.GELU):
        return _gelu(x, module.approximate)
    kinds = {nn.ReLU: "relu", nn.Sigmoid: "sigmoid", nn.Tanh: "tanh", nn.SiLU: "silu"}
    name = kinds.get(type(module))
    return _Fused([x], _UNARY[name]) if name else None


def _fusable(gm: torch.fx.GraphModule, node: torch.fx.Node) -> _Fused | None:
    if effects.is_mutating(gm, node):
        return None
    module = ops.call_module(gm, node)
    if module is not None:
        return _module_op(module, node.args[0]) if len(node.args) == 1 else None
    name = ops.op_name(node)
    if name is None or name not in _SIGNATURES:
        return None
    if name == "div" and node.kwargs.get("rounding_mode") is not None:
        return None
    args = ops.arguments(node, _SIGNATURES[name])
    if args is None:
        return None
    fused = _bound(name, args)
    if fused is None or not all(_operand_kind(v) for v in fused.operands):
        return None
    if not any(isinstance(v, torch.fx.Node) for v in fused.operands):
        return None
    return fused


def _operand_kind(value: Any) -> str | None:
    if tracing.self_scalar(value) is not None:
        return None  # the kernel's constants are compiled in: this pass needs the value
    if isinstance(value, torch.fx.Node):
        return "node"
    if ops.is_scalar(value):
        return "scalar"
    return None


# -- finding the epilogue --------------------------------------------------------------------


@dataclass
class _Leaf:
    node: torch.fx.Node
    layout: str  # "full" | "block" | "one"
    block: tuple[int, int] = (0, 0)  # first and last dim of a "block" leaf's broadcast dims


@dataclass
class _Epilogue:
    order: list[torch.fx.Node]  # fused nodes in graph order; the last is the output
    ops: dict[torch.fx.Node, _Fused]
    leaves: list[_Leaf]
    scalars: list[float | int]
    shape: tuple[int, ...]
    in_place: bool  # the first leaf is a fresh tensor only the epilogue reads
    changes: list[str] = field(default_factory=list)


def _layout(shape: tuple[int, ...], leaf: tuple[int, ...]) -> tuple[str, tuple[int, int]] | None:
    """How a leaf broadcasts against the output: all of it, one block of dims, or one value."""
    rank = len(shape)
    if len(leaf) > rank:
        return None
    padded = (1,) * (rank - len(leaf)) + leaf
    real = [d for d in range(rank) if padded[d] != 1]
    if not real:
        return ("full", (0, rank - 1)) if math.prod(shape) == 1 else ("one", (0, 0))
    first, last = real[0], real[-1]
    if any(padded[d] != shape[d] for d in range(first, last + 1)):
        return None
    if (first == 0 and last == rank - 1) or math.prod(shape[:first] + shape[last + 1 :]) == 1:
        return ("full", (0, rank - 1))
    return ("block", (first, last))


def _find_epilogue(gm: torch.fx.GraphModule) -> _Epilogue:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    result = output.args[0]
    if not isinstance(result, torch.fx.Node):
        raise PassError("forward returns several values; only a single tensor is fused")
    shape = ops.tensor_shape(result)
    if shape is None or ops.tensor_dtype(result) != torch.float32:
        raise PassError("forward's output is not a float32 tensor")
    nodes = list(gm.graph.nodes)
    banned: set[torch.fx.Node] = set()
    while True:
        chosen: dict[torch.fx.Node, _Fused] = {}
        for node in reversed(nodes):
            if node in banned or ops.tensor_shape(node) != shape:
                continue
            if ops.tensor_dtype(node) != torch.float32:
                continue
            if node is not result and not (node.users and all(u in chosen for u in node.users)):
                continue
            fused = _fusable(gm, node)
            if fused is not None:
                chosen[node] = fused
        if result not in chosen:
            raise PassError("forward does not end with a fusable elementwise op")
        bad = {
            node
            for node, fused in chosen.items()
            if any(
                isinstance(v, torch.fx.Node) and v not in chosen and _leaf(v, shape) is None
                for v in fused.operands
            )
        }
        if not bad:
            break
        banned |= bad
    order = [n for n in nodes if n in chosen]
    if len(order) < MIN_OPS:
        raise PassError(
            f"the elementwise epilogue is {len(order)} op ({_describe(gm, order)}): "
            "fusing it saves no pass over memory"
        )
    leaves: list[_Leaf] = []
    scalars: list[float | int] = []
    for node in order:
        for value in chosen[node].operands:
            if isinstance(value, torch.fx.Node):
                if value not in chosen and all(leaf.node is not value for leaf in leaves):
                    leaves.append(_leaf(value, shape))  # type: ignore[arg-type]
            else:
                scalars.append(value)
    blocks = {leaf.block for leaf in leaves if leaf.layout == "block"}
    if len(blocks) > 1:
        raise PassError("the epilogue's parameters broadcast along different dims")
    full = [leaf for leaf in leaves if leaf.layout == "full"]
    if not full:
        raise PassError("no operand of the epilogue has the output's full shape")
    fresh = [leaf for leaf in full if _fresh_and_private(gm, leaf.node, chosen)]
    primary = (fresh or full)[0]
    leaves.remove(primary)
    leaves.insert(0, primary)
    epilogue = _Epilogue(order, chosen, leaves, scalars, shape, in_place=bool(fresh))
    epilogue.changes = [f"fused {len(order)} elementwise ops: {_describe(gm, order)}"]
    if fresh:
        epilogue.changes.append(f"written in place into {primary.node.name} (a fresh tensor)")
    return epilogue


def _leaf(node: torch.fx.Node, shape: tuple[int, ...]) -> _Leaf | None:
    leaf_shape = ops.tensor_shape(node)
    if leaf_shape is None or ops.tensor_dtype(node) != torch.float32:
        return None
    layout = _layout(shape, leaf_shape)
    return _Leaf(node, *layout) if layout else None


_FRESH_MODULES = (
    torch.nn.modules.conv._ConvNd,
    torch.nn.Linear,
    torch.nn.Bilinear,
    torch.nn.modules.batchnorm._BatchNorm,
    torch.nn.LayerNorm,
    torch.nn.GroupNorm,
)
_FRESH_FUNCTIONS = {"conv1d", "conv2d", "conv3d", "linear", "matmul", "mm", "bmm", "addmm"}
_FRESH_FUNCTIONS |= {"baddbmm", "batch_norm", "layer_norm", "group_norm", "conv_transpose2d"}


def _fresh_and_private(gm: torch.fx.GraphModule, node: torch.fx.Node, chosen: dict) -> bool:
    """Is this tensor new memory (a conv or GEMM result, not a view or an input) that only
    the epilogue reads? Then the kernel may overwrite it instead of allocating."""
    if not all(user in chosen for user in node.users):
        return False
    module = ops.call_module(gm, node)
    if module is not None:
        return isinstance(module, _FRESH_MODULES)
    return node.op == "call_function" and ops.op_name(node) in _FRESH_FUNCTIONS


def _describe(gm: torch.fx.GraphModule, order: list[torch.fx.Node]) -> str:
    names = []
    for node in order:
        module = ops.call_module(gm, node)
        names.append(type(module).__name__ if module is not None else ops.op_name(node))
    return ", ".join(str(n) for n in names)


# -- C++ -------------------------------------------------------------------------------------


def cpp_source(epilogue: _Epilogue) -> str:
    """The extension's C++ text: one function `run(leaves..., scalars...)`."""
    rank = len(epilogue.shape)
    leaves, scalars = epilogue.leaves, epilogue.scalars
    params = [f"torch::Tensor l{k}" for k in range(len(leaves))]
    params += [f"double s{k}" for k in range(len(scalars))]
    block = next((leaf.block for leaf in leaves if leaf.layout == "block"), None)
    lines = [
        "#include <torch/extension.h>",
        "#include <algorithm>",
        "#include <cmath>",
        "",
        f"torch::Tensor run({', '.join(params)}) {{",
        *_operands(epilogue, block, rank),
        *_loop(_body(epilogue, "i", "c"), block, rank),
        "    return out;",
        "}",
        "",
    ]
    return "\n".join(lines)


def _operands(epilogue: _Epilogue, block: tuple[int, int] | None, rank: int) -> list[str]:
    """The checks that each operand is what the kernel was compiled for, the output, and
    the pointers and constants the loop reads."""
    leaves, scalars = epilogue.leaves, epilogue.scalars
    lines: list[str] = []
    for k in range(len(leaves)):
        lines.append(
            f"    TORCH_CHECK(l{k}.device().is_cpu() && l{k}.scalar_type() == torch::kFloat && "
            f'l{k}.is_contiguous(), "operand {k}: a contiguous float32 CPU tensor is expected");'
        )
    out = "l0" if epilogue.in_place else "torch::empty_like(l0)"
    lines += [f"    torch::Tensor out = {out};", "    const int64_t n = out.numel();"]
    lines.append("    float* __restrict__ po = out.data_ptr<float>();")
    if block:
        first, last = block
        lines.append(
            f'    TORCH_CHECK(l0.dim() == {rank}, "the activation must have {rank} dims");'
        )
        lines.append("    int64_t count = 1;")
        lines.append(f"    for (int64_t d = {first}; d <= {last}; ++d) count *= out.size(d);")
    for k, leaf in enumerate(leaves):
        if k == 0 and epilogue.in_place:
            continue
        if leaf.layout == "full":
            check = f"l{k}.sizes() == l0.sizes()"
        elif leaf.layout == "block":
            check = f"l{k}.numel() == count"
        else:
            check = f"l{k}.numel() == 1"
        lines.append(f'    TORCH_CHECK({check}, "operand {k} does not match the activation");')
        lines.append(f"    const float* __restrict__ p{k} = l{k}.data_ptr<float>();")
    lines.append("    if (n == 0) return out;")
    lines += [f"    const float c{k} = static_cast<float>(s{k});" for k in range(len(scalars))]
    lines += [
        f"    const float v{k} = p{k}[0];" for k, leaf in enumerate(leaves) if leaf.layout == "one"
    ]
    return lines


def _loop(body: list[str], block: tuple[int, int] | None, rank: int) -> list[str]:
    """The OpenMP loop over the output that runs `body` for each element `i`."""
    if block is None:
        return [
            "#pragma omp parallel for simd schedule(static) if(n >= 32768)",
            "    for (int64_t i = 0; i < n; ++i) {",
            *(f"        {line}" for line in body),
            "    }",
        ]
    if block[1] == rank - 1:  # the broadcast dims are the innermost: vectorise along them
        return [
            "    const int64_t rows = n / count;",
            "#pragma omp parallel for schedule(static) if(n >= 32768)",
            "    for (int64_t r = 0; r < rows; ++r) {",
            "        const int64_t base = r * count;",
            "#pragma omp simd",
            "        for (int64_t c = 0; c < count; ++c) {",
            "            const int64_t i = base + c;",
            *(f"            {line}" for line in body),
            "        }",
            "    }",
        ]
    return [  # per-channel values are constant along the inner dims
        "    int64_t inner = 1;",
        f"    for (int64_t d = {block[1] + 1}; d < {rank}; ++d) inner *= out.size(d);",
        "    const int64_t rows = n / inner;",
        "#pragma omp parallel for schedule(static) if(n >= 32768)",
        "    for (int64_t r = 0; r < rows; ++r) {",
        "        const int64_t c = r % count;",
        "        const int64_t base = r * inner;",
        "#pragma omp simd",
        "        for (int64_t j = 0; j < inner; ++j) {",
        "            const int64_t i = base + j;",
        *(f"            {line}" for line in body),
        "        }",
        "    }",
    ]


def _body(epilogue: _Epilogue, flat: str, channel: str) -> list[str]:
    names: dict[torch.fx.Node, str] = {}
    body: list[str] = []
    for k, leaf in enumerate(epilogue.leaves):
        names[leaf.node] = f"v{k}"
        pointer = "po" if k == 0 and epilogue.in_place else f"p{k}"
        if leaf.layout == "full":
            body.append(f"const float v{k} = {pointer}[{flat}];")
        elif leaf.layout == "block":
            body.append(f"const float v{k} = {pointer}[{channel}];")
    scalar = 0
    for j, node in enumerate(epilogue.order):
        fused = epilogue.ops[node]
        operands = []
        for value in fused.operands:
            if isinstance(value, torch.fx.Node):
                operands.append(names[value])
            else:
                operands.append(f"c{scalar}")
                scalar += 1
        names[node] = f"t{j}"
        body.append(f"const float t{j} = {fused.template.format(*operands)};")
    body.append(f"po[{flat}] = t{len(epilogue.order) - 1};")
    return body


# -- the pass --------------------------------------------------------------------------------

_IMPORT = "from torch.utils.cpp_extension import load_inline"
_PRELUDE = '''
_ELEMENTWISE_SOURCE = r"""
{source}"""
_ELEMENTWISE_NAME = "{name}"
_EXTENSIONS = {{}}


def _elementwise_extension():
    """The fused kernel, compiled on first use (seconds), then cached for the process."""
    extension = _EXTENSIONS.get(_ELEMENTWISE_NAME)
    if extension is None:
        extension = load_inline(
            name=_ELEMENTWISE_NAME,
            cpp_sources=_ELEMENTWISE_SOURCE,
            functions=["run"],
            extra_cflags={cflags},
            extra_ldflags=["-fopenmp"],
        )
        _EXTENSIONS[_ELEMENTWISE_NAME] = extension
    return extension
'''


class CppElementwise:
    name = "cpp-elementwise"

    def apply(self, program: Program) -> Rewrite:
        if program.device != "cpu":
            return Rewrite(None, "the C++/OpenMP kernel is for the CPU; this kernel runs on CUDA")
        if "load_inline" in program.source or "cpp_extension" in program.source:
            return Rewrite(None, "the kernel already calls a C++ extension")
        gm = tracing.trace(program)
        epilogue = _find_epilogue(gm)
        source_text = cpp_source(epilogue)
        digest = hashlib.sha256((source_text + repr(CFLAGS)).encode()).hexdigest()[:16]
        name = f"kernel_agent_ew_{digest}"
        _replace(gm, epilogue)
        count = len(epilogue.leaves) + len(epilogue.scalars)
        params = ", ".join(["self", *(f"a{k}" for k in range(count))])
        leaves = [f"a{k}.contiguous()" for k in range(len(epilogue.leaves))]
        scalars = [f"a{k}" for k in range(len(epilogue.leaves), count)]
        method = (
            f"    def {METHOD}({params}):\n"
            f'        """The {len(epilogue.order)} fused elementwise ops, in one C++ loop."""\n'
            f"        return _elementwise_extension().run({', '.join(leaves + scalars)})\n"
        )
        module = codegen.emit(
            program,
            gm,
            doc="The forward with its elementwise epilogue fused into one C++/OpenMP loop.",
            methods={METHOD: method},
        )
        prelude = _PRELUDE.format(source=source_text, name=name, cflags=json.dumps(CFLAGS))
        marker = "\n\n\nclass ModelNew("
        if marker not in module:
            raise PassError("cannot place the extension before class ModelNew")
        module = module.replace(marker, "\n" + prelude.rstrip() + marker, 1)
        anchor = "import torch.nn as nn\n"
        if anchor in module:
            module = module.replace(anchor, anchor + _IMPORT + "\n", 1)
        else:
            module = _IMPORT + "\n" + module
        return Rewrite(
            module,
            f"{len(epilogue.order)} elementwise ops fused into one C++/OpenMP loop",
            changes=epilogue.changes,
            method="fx",
        )


def _replace(gm: torch.fx.GraphModule, epilogue: _Epilogue) -> None:
    """Route the output through one SelfMethod call and drop the fused nodes."""
    last = epilogue.order[-1]
    arguments = tuple([leaf.node for leaf in epilogue.leaves] + list(epilogue.scalars))
    impl = _reference(gm, epilogue)
    with gm.graph.inserting_after(last):
        target = codegen.SelfMethod(METHOD, impl)
        call = gm.graph.create_node("call_function", target, arguments, name="fused")
    last.replace_all_uses_with(call)
    for node in reversed(epilogue.order):
        gm.graph.erase_node(node)
    gm.recompile()


def _reference(gm: torch.fx.GraphModule, epilogue: _Epilogue) -> Callable[..., Any]:
    """The fused ops in PyTorch, so the rewritten graph still runs (shape propagation).
    The nodes' calls are copied now: erasing a node clears its arguments."""
    steps = [
        (node, node.op, node.target, node.args, node.kwargs, ops.call_module(gm, node))
        for node in epilogue.order
    ]
    leaves = [leaf.node for leaf in epilogue.leaves]

    def run(*values: Any) -> Any:
        env: dict[torch.fx.Node, Any] = dict(zip(leaves, values, strict=False))

        def load(value: Any) -> Any:
            return env[value] if isinstance(value, torch.fx.Node) else value

        result = None
        for node, op, target, node_args, node_kwargs, module in steps:
            args = torch.fx.node.map_aggregate(node_args, load)
            kwargs = torch.fx.node.map_aggregate(node_kwargs, load)
            if module is not None:
                result = module(*args, **kwargs)
            elif op == "call_method":
                result = getattr(args[0], target)(*args[1:], **kwargs)
            else:
                result = target(*args, **kwargs)
            env[node] = result
        return result

    return run
