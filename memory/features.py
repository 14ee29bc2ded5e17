"""Code features the skill gate checks, read from the source with tree-sitter.

The gate needs facts a profile cannot give: that a softmax is written by hand, that a sum
follows a GEMM, that a CUDA kernel sits in a `load_inline` string. These are found
syntactically, in source order inside each `forward` (and the functions it may call).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

import tree_sitter_python
from tree_sitter import Language, Node, Parser

_LANGUAGE = Language(tree_sitter_python.language())
_PARSER = Parser(_LANGUAGE)
_LOCK = threading.Lock()

GEMM = {"matmul", "mm", "bmm", "addmm", "baddbmm", "linear", "einsum", "mv", "addmv"}
REDUCTIONS = {
    "sum",
    "mean",
    "max",
    "min",
    "amax",
    "amin",
    "prod",
    "logsumexp",
    "var",
    "std",
    "norm",
    "argmax",
    "argmin",
}
POINTWISE = {
    "relu",
    "gelu",
    "sigmoid",
    "tanh",
    "exp",
    "log",
    "clamp",
    "silu",
    "mish",
    "hardtanh",
    "leaky_relu",
    "elu",
    "softplus",
    "abs",
    "sqrt",
    "rsqrt",
    "pow",
    "neg",
    "add",
    "mul",
    "div",
    "sub",
    "where",
    "minimum",
    "maximum",
    "clamp_min",
    "clamp_max",
}
HOST_SYNC = {"item", "cpu", "tolist", "numpy"}
LAYER_KINDS = {
    "Linear": "linear",
    "Conv1d": "conv",
    "Conv2d": "conv",
    "Conv3d": "conv",
    "ConvTranspose2d": "conv",
    "BatchNorm1d": "batchnorm",
    "BatchNorm2d": "batchnorm",
    "BatchNorm3d": "batchnorm",
    "LayerNorm": "layernorm_call",
    "Dropout": "dropout",
    "Softmax": "softmax_call",
    "MultiheadAttention": "sdpa",
}
ALL_FEATURES = (
    "loops", "reductions", "manual_softmax", "manual_norm", "reduction_after_gemm",
    "scale_after_linear", "size1_reduction_candidate", "load_inline_cuda", "load_inline_cpp",
    "triton_jit", "host_sync", "contiguous_calls", "transpose_calls", "elementwise_chain",
    "python_loop_over_tensor", "dropout", "batchnorm", "conv", "linear", "matmul",
    "softmax_call", "layernorm_call", "sdpa", "manual_attention",
)  # fmt: skip


@dataclass(frozen=True)
class Event:
    """One operation in source order: a call's name, or an operator like `@` or `*`."""

    kind: str  # "call" or "op"
    name: str
    line: int
    keepdim: bool = False
    module_layer: str | None = None  # for self.<attr>(...) calls bound to a known layer


@dataclass(frozen=True)
class CodeFeatures:
    """The features found, with the line that shows each (for the gate's explanations)."""

    found: dict[str, int]

    def __contains__(self, name: str) -> bool:
        return name in self.found

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.found)


def _text(node: Node | None) -> str:
    return node.text.decode("utf-8", "replace") if node is not None and node.text else ""


def _walk(node: Node):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def _call_name(call: Node) -> str:
    function = call.child_by_field_name("function")
    if function is None:
        return ""
    if function.type == "attribute":
        return _text(function.child_by_field_name("attribute"))
    return _text(function)


def _layer_attributes(root: Node) -> dict[str, str]:
    """`self.fc = nn.Linear(...)` → {"fc": "linear"}: calls of self.fc are GEMMs."""
    layers: dict[str, str] = {}
    for node in _walk(root):
        if node.type != "assignment":
            continue
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if left is None or right is None or right.type != "call":
            continue
        kind = LAYER_KINDS.get(_call_name(right))
        if (
            kind
            and left.type == "attribute"
            and _text(left.child_by_field_name("object")) == "self"
        ):
            layers[_text(left.child_by_field_name("attribute"))] = kind
    return layers


def _events(body: Node, layers: dict[str, str]) -> list[Event]:
    events: list[Event] = []
    for node in _walk(body):
        line = node.start_point.row + 1
        if node.type == "call":
            name = _call_name(node)
            keepdim = "keepdim=True" in _text(node.child_by_field_name("arguments")).replace(
                " ", ""
            )
            function = node.child_by_field_name("function")
            layer = None
            if function is not None and function.type == "attribute":
                owner = _text(function.child_by_field_name("object"))
                if owner == "self":
                    layer = layers.get(name)
            events.append(Event("call", name, line, keepdim, layer))
        elif node.type == "binary_operator":
            operator = node.child_by_field_name("operator")
            events.append(Event("op", _text(operator), line))
        elif node.type == "augmented_assignment":
            operator = node.child_by_field_name("operator")
            events.append(Event("op", _text(operator).rstrip("="), line))
        elif node.type == "attribute" and _text(node.child_by_field_name("attribute")) == "T":
            events.append(Event("call", "T", line))
    events.sort(key=lambda event: event.line)
    return events


def _is_gemm(event: Event) -> bool:
    return (event.kind == "op" and event.name == "@") or (
        event.kind == "call" and (event.name in GEMM or event.module_layer in ("linear", "conv"))
    )


def _forward_bodies(root: Node) -> list[Node]:
    """Each forward's body, and the bodies of the module-level functions they call (by
    name, transitively): a forward that only calls the user's function (the language
    server's wrapper around a function target) has its work there."""
    bodies = []
    for node in _walk(root):
        if node.type == "function_definition":
            name = _text(node.child_by_field_name("name"))
            if name == "forward" or name.startswith("_forward"):
                body = node.child_by_field_name("body")
                if body is not None:
                    bodies.append(body)
    helpers = {
        _text(node.child_by_field_name("name")): node.child_by_field_name("body")
        for node in root.named_children
        if node.type == "function_definition"  # decorated ones (Triton kernels) excluded
    }
    todo = list(bodies)
    while todo:
        for node in _walk(todo.pop()):
            function = node.child_by_field_name("function") if node.type == "call" else None
            if function is None or function.type != "identifier":
                continue
            body = helpers.pop(_text(function), None)
            if body is not None:
                bodies.append(body)
                todo.append(body)
    return bodies


def extract_features(source: str) -> CodeFeatures:
    """Every feature of ALL_FEATURES present in `source`, each with a line that shows it."""
    with _LOCK:
        root = _PARSER.parse(source.encode("utf-8", "replace")).root_node
    found: dict[str, int] = {}

    def mark(name: str, line: int) -> None:
        found.setdefault(name, line)

    layers = _layer_attributes(root)
    for attr, kind in layers.items():
        line = source[: source.find(f"self.{attr}")].count("\n") + 1
        mark(kind, line)
    for node in _walk(root):
        is_jit = node.type == "decorator" and re.search(r"\b(triton\.)?jit\b", _text(node))
        if is_jit and ("triton" in _text(node) or "from triton" in source):
            mark("triton_jit", node.start_point.row + 1)
        if node.type == "call" and _call_name(node) in ("load_inline", "load"):
            arguments = _text(node.child_by_field_name("arguments"))
            line = node.start_point.row + 1
            mark("load_inline_cuda" if "cuda_sources" in arguments else "load_inline_cpp", line)
    for body in _forward_bodies(root):
        _forward_features(body, layers, mark)
    return CodeFeatures(dict(sorted(found.items())))


def _forward_features(body: Node, layers: dict[str, str], mark) -> None:
    for node in _walk(body):
        if node.type in ("for_statement", "while_statement"):
            mark("loops", node.start_point.row + 1)
            header = _text(node.child_by_field_name("right")) or _text(
                node.child_by_field_name("condition")
            )
            if re.search(r"\.(shape|size)\b|\.numel\(|range\(len\(", header):
                mark("python_loop_over_tensor", node.start_point.row + 1)
    events = _events(body, layers)
    names = [event.name for event in events if event.kind == "call"]
    gemm_lines = [event.line for event in events if _is_gemm(event)]
    reductions = [event for event in events if event.kind == "call" and event.name in REDUCTIONS]
    for event in events:
        if event.kind == "call":
            if event.name in HOST_SYNC or event.name == "print":
                mark("host_sync", event.line)
            if event.name == "contiguous":
                mark("contiguous_calls", event.line)
            if event.name in ("t", "transpose", "permute", "T"):
                mark("transpose_calls", event.line)
            if event.name in ("softmax", "log_softmax"):
                mark("softmax_call", event.line)
            if event.name in ("layer_norm", "group_norm", "rms_norm"):
                mark("layernorm_call", event.line)
            if event.name == "scaled_dot_product_attention":
                mark("sdpa", event.line)
            if event.name in ("dropout", "dropout2d"):
                mark("dropout", event.line)
            if event.name in ("conv1d", "conv2d", "conv3d"):
                mark("conv", event.line)
            if event.name == "linear":
                mark("linear", event.line)
        if _is_gemm(event) and event.module_layer != "conv":
            mark("matmul", event.line)
    if reductions:
        mark("reductions", reductions[0].line)
    if gemm_lines and any(event.line >= gemm_lines[0] for event in reductions):
        mark("reduction_after_gemm", min(e.line for e in reductions if e.line >= gemm_lines[0]))
    keepdims = [event for event in reductions if event.keepdim]
    if keepdims and any(event.line > keepdims[0].line for event in reductions):
        mark("size1_reduction_candidate", keepdims[0].line)
    if "exp" in names and "sum" in names and any(e.kind == "op" and e.name == "/" for e in events):
        mark("manual_softmax", next(e.line for e in events if e.name == "exp"))
    if (
        "mean" in names
        and (
            {"var", "std", "pow"} & set(names)
            or any(e.kind == "op" and e.name == "**" for e in events)
        )
        and {"sqrt", "rsqrt"} & set(names)
    ):
        mark("manual_norm", next(e.line for e in events if e.name == "mean"))
    if gemm_lines:
        after = [e for e in events if e.line > gemm_lines[0]]
        if any(e.kind == "op" and e.name in ("*", "/", "+", "-") for e in after[:3]):
            mark("scale_after_linear", after[0].line)
    pointwise = [
        e
        for e in events
        if (e.kind == "call" and e.name in POINTWISE)
        or (e.kind == "op" and e.name in ("*", "/", "+", "-"))
    ]
    if len(pointwise) >= 2:  # two ops fused already save a round trip through memory
        mark("elementwise_chain", pointwise[0].line)
    softmax_lines = [e.line for e in events if e.name in ("softmax", "exp")]
    if len(gemm_lines) >= 2 and softmax_lines and gemm_lines[0] < softmax_lines[0] < gemm_lines[-1]:
        mark("manual_attention", gemm_lines[0])
