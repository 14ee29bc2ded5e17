"""Static hints: slow patterns visible in the syntax tree, shown at once (no profile needed).

They look only at code that runs per call: `forward` methods and the functions that launch a
target's kernels. Each hint names the skill that fixes it, where the library has one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tree_sitter import Node

from agents.targets.model import Target
from agents.targets.syntax import definition, descendants, node_text

HOST_SYNC_METHODS = {"item", "cpu", "tolist", "numpy"}
CAT_CALLS = {"cat", "concat", "concatenate", "stack", "hstack", "vstack"}


@dataclass(frozen=True)
class Hint:
    """One finding; rows are 0-based, columns are UTF-8 byte offsets (tree-sitter's)."""

    start: tuple[int, int]
    end: tuple[int, int]
    message: str
    code: str  # a skill id where one fixes it

    @property
    def line(self) -> int:
        return self.start[0]


_BODY_TYPES = (
    "call",
    "for_statement",
    "while_statement",
    "binary_operator",
    "augmented_assignment",
)


@dataclass
class _Body:
    """One function body, walked once: its calls, loops and operators."""

    calls: list[tuple[Node, str, Node | None]]  # (call, short name, receiver)
    loops: list[Node]
    operators: set[str]

    @classmethod
    def of(cls, body: Node) -> _Body:
        calls: list[tuple[Node, str, Node | None]] = []
        loops: list[Node] = []
        operators: set[str] = set()
        for node in descendants(body, _BODY_TYPES):
            kind = node.type
            if kind == "call":
                function = node.child_by_field_name("function")
                if function is None:
                    continue
                if function.type == "attribute":
                    name = node_text(function.child_by_field_name("attribute"))
                    calls.append((node, name, function.child_by_field_name("object")))
                elif function.type == "identifier":
                    calls.append((node, node_text(function), None))
            elif kind in ("for_statement", "while_statement"):
                loops.append(node)
            elif kind == "binary_operator":
                operators.add(node_text(node.child_by_field_name("operator")))
            elif kind == "augmented_assignment":
                operators.add(node_text(node.child_by_field_name("operator")).rstrip("="))
        return cls(calls, loops, operators)

    def first_calls(self) -> dict[str, Node]:
        first: dict[str, Node] = {}
        for call, name, _ in self.calls:
            first.setdefault(name, call)
        return first


def hot_bodies(root: Node, targets: list[Target]) -> list[Node]:
    """Function definitions whose code runs on every call: the `forward` methods of
    top-level classes and the target functions (launchers)."""
    names = {t.name for t in targets if t.kind != "module"}
    bodies: list[Node] = []
    for node in root.named_children:
        inner = definition(node)
        if inner.type == "function_definition":
            if node_text(inner.child_by_field_name("name")) in names:
                bodies.append(inner)
        elif inner.type == "class_definition":
            bodies.extend(forward_methods(inner))
    return bodies


def forward_methods(cls: Node) -> list[Node]:
    """The `forward` (and `_forward*`) methods of a class: they run on every call."""
    block = cls.child_by_field_name("body")
    methods: list[Node] = []
    for member in block.named_children if block is not None else []:
        method = definition(member)
        name = node_text(method.child_by_field_name("name"))
        if method.type == "function_definition" and (
            name == "forward" or name.startswith("_forward")
        ):
            methods.append(method)
    return methods


def function_hints(function: Node) -> list[Hint]:
    """The hints of one hot function, in rule order (not yet sorted or deduplicated)."""
    body = function.child_by_field_name("body")
    if body is None:
        return []
    summary = _Body.of(body)
    return [
        *_host_syncs(summary),
        *_element_loops(summary, _params(function)),
        *_manual_softmax(summary),
        *_manual_norm(summary),
        *_cat_in_loop(summary),
    ]


def unique_hints(hints: list[Hint]) -> list[Hint]:
    """Sorted by position, at most one per rule and line."""
    seen: set[tuple[int, str]] = set()
    unique = []
    for hint in sorted(hints, key=lambda h: (h.start, h.code)):
        if (hint.line, hint.code) not in seen:
            seen.add((hint.line, hint.code))
            unique.append(hint)
    return unique


def find_hints(root: Node, targets: list[Target]) -> list[Hint]:
    """All hints in a document, sorted by position (at most one per rule and line)."""
    hints: list[Hint] = []
    for function in hot_bodies(root, targets):
        hints.extend(function_hints(function))
    return unique_hints(hints)


def _params(function: Node) -> set[str]:
    params = function.child_by_field_name("parameters")
    names = set()
    for child in params.named_children if params is not None else []:
        if child.type == "identifier":
            names.add(node_text(child))
        elif child.type in ("typed_parameter", "default_parameter", "typed_default_parameter"):
            ident = child.child_by_field_name("name") or next(
                (c for c in child.named_children if c.type == "identifier"), None
            )
            if ident is not None:
                names.add(node_text(ident))
    return names - {"self"}


def _span(node: Node) -> tuple[tuple[int, int], tuple[int, int]]:
    return (node.start_point.row, node.start_point.column), (
        node.end_point.row,
        node.end_point.column,
    )


def _host_syncs(body: _Body) -> Iterator[Hint]:
    for call, name, receiver in body.calls:
        arguments = call.child_by_field_name("arguments")
        args = node_text(arguments).replace(" ", "")
        if receiver is not None and name in HOST_SYNC_METHODS and args == "()":
            yield Hint(
                *_span(call),
                f"`.{name}()` here copies to the host and waits for the device on every call: "
                "all queued work must finish first, and CUDA graphs cannot capture it",
                "torch-avoid-host-sync",
            )
        elif receiver is not None and name == "to" and args.startswith(("('cpu'", '("cpu"')):
            yield Hint(
                *_span(call),
                '`.to("cpu")` here copies to the host and waits for the device on every call',
                "torch-avoid-host-sync",
            )
        elif receiver is None and name == "print":
            yield Hint(
                *_span(call),
                "`print` here formats tensors on the host: it waits for the device on every "
                "call and is slow on any device",
                "torch-avoid-host-sync",
            )
        elif name == "synchronize" and receiver is not None and "cuda" in node_text(receiver):
            yield Hint(
                *_span(call),
                "`torch.cuda.synchronize()` here stalls every call until the device is idle",
                "torch-avoid-host-sync",
            )


def _element_loops(body: _Body, params: set[str]) -> Iterator[Hint]:
    for node in body.loops:
        if node.type != "for_statement":
            continue
        right = node.child_by_field_name("right")
        header = node_text(right).replace(" ", "")
        over_tensor = (
            header.startswith("range(")
            and any(key in header for key in (".shape", ".size(", ".numel(", "len("))
        ) or (right is not None and right.type == "identifier" and node_text(right) in params)
        if over_tensor and right is not None:
            yield Hint(
                (node.start_point.row, node.start_point.column),
                (right.end_point.row, right.end_point.column),
                "Python loop over tensor elements: each iteration launches its own small "
                "ops; one batched tensor expression does the same work in a few kernels",
                "torch-batch-small-ops",
            )


def _manual_softmax(body: _Body) -> Iterator[Hint]:
    calls = body.first_calls()
    if "exp" in calls and "sum" in calls and "/" in body.operators:
        yield Hint(
            *_span(calls["exp"]),
            "hand-written softmax (exp, sum, divide): torch.softmax does it in one fused, "
            "numerically stable kernel",
            "torch-library-softmax",
        )


def _manual_norm(body: _Body) -> Iterator[Hint]:
    calls = body.first_calls()
    variance = {"var", "std", "pow", "square"} & set(calls) or "**" in body.operators
    if "mean" in calls and variance and {"sqrt", "rsqrt"} & set(calls):
        yield Hint(
            *_span(calls["mean"]),
            "hand-written normalization (mean, variance, square root): F.layer_norm, "
            "F.rms_norm or F.group_norm compute it in one fused kernel",
            "torch-library-layernorm",
        )


def _cat_in_loop(body: _Body) -> Iterator[Hint]:
    for loop in body.loops:
        loop_body = loop.child_by_field_name("body")
        if loop_body is None:
            continue
        for call, name, receiver in body.calls:
            inside = loop_body.start_byte <= call.start_byte < loop_body.end_byte
            torch_call = receiver is not None and node_text(receiver) == "torch"
            if inside and name in CAT_CALLS and torch_call:
                yield Hint(
                    *_span(call),
                    f"torch.{name} inside a loop copies everything gathered so far on "
                    f"every iteration (quadratic): append to a list and call torch.{name} "
                    "once after the loop",
                    "torch-avoid-redundant-copies",
                )
