"""What the target finder needs to know of one top-level statement, read from it alone.

Facts hold no tree nodes and no absolute positions (rows are relative to the statement's
first row; hint columns are kept, as a statement that did not change keeps its columns), so
the facts of a statement an edit did not touch stay valid however far the edit moved it.
`agents.targets.analysis` joins them into targets and hints, for a whole tree or after an edit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tree_sitter import Node

from agents.targets.cuda import global_functions
from agents.targets.hints import Hint, forward_methods, function_hints
from agents.targets.syntax import (
    assignment,
    call_name,
    def_name,
    definition,
    descendants,
    is_load_inline,
    is_triton_kernel,
    method,
    node_text,
    parameters,
)

RelKernel = tuple[str, int, int]
"""A CUDA kernel: (name, first row, last row), rows relative to the statement."""
CudaItem = tuple[str, object]
"""One `cuda_sources` item: ("ident", variable name) or ("inline", tuple of RelKernel)."""
RelHint = tuple[int, int, int, int, str, str]
"""A hint: (start row, start column, end row, end column, message, code), rows relative."""


@dataclass
class Facts:
    """One top-level statement, as the target finder and the hints see it."""

    inner_type: str  # the definition's type ("class_definition"...), or the statement's
    name: str = ""
    name_row: int = 0  # where the class/def keyword is (lenses go there), relative
    inner_end_row: int = 0  # last row of the definition (a Triton kernel's end), relative
    end_row: int = 0  # last row of the statement, relative
    is_triton: bool = False
    params: tuple[str, ...] = ()
    bases: tuple[str, ...] = ()
    forward_params: tuple[str, ...] = ()
    init_params: tuple[str, ...] = ()
    calls: tuple[tuple[str, str], ...] = ()  # ("sub" | "call" | "ident", name), walk order
    launch_keys: frozenset[tuple[str, str]] = frozenset()  # the set of `calls`
    callees: frozenset[str] = frozenset()
    class_refs: frozenset[str] = frozenset()  # names in class argument lists inside it
    load_inline: tuple[CudaItem, ...] | None = None  # a load_inline it calls or assigns
    assign_name: str | None = None
    assign_string: bool = False
    class_hints: tuple[RelHint, ...] = ()
    _string_kernels: tuple[RelKernel, ...] | None = field(default=None, repr=False)
    _function_hints: tuple[RelHint, ...] | None = field(default=None, repr=False)

    def string_kernels(self, node: Callable[[], Node]) -> tuple[RelKernel, ...]:
        """The `__global__` kernels of the string this statement assigns (parsed once)."""
        if self._string_kernels is None:
            statement = node()
            pair = assignment(statement)
            base = statement.start_point.row
            found = global_functions(pair[1]) if pair else []
            self._string_kernels = tuple(
                (k.name, k.start_line - base, k.end_line - base) for k in found
            )
        return self._string_kernels

    def function_hints(self, node: Callable[[], Node]) -> tuple[RelHint, ...]:
        """The hints of this function, were it hot (a target): computed on first need."""
        if self._function_hints is None:
            statement = node()
            hints = function_hints(definition(statement))
            self._function_hints = _relative(hints, statement.start_point.row)
        return self._function_hints


def facts_of(node: Node) -> Facts:
    """Read one top-level statement."""
    inner = definition(node)
    base = node.start_point.row
    facts = Facts(inner.type, end_row=node.end_point.row - base)
    facts.is_triton = is_triton_kernel(node)
    if inner.type in ("class_definition", "function_definition"):
        facts.name = def_name(inner)
        facts.name_row = inner.start_point.row - base
        facts.inner_end_row = inner.end_point.row - base
        facts.params = tuple(parameters(inner))
        _read_calls(node, facts)
    if inner.type == "function_definition":
        for call in descendants(inner, ("call",)):
            if is_load_inline(call):
                facts.load_inline = _cuda_items(call, base)
                break
    elif inner.type == "class_definition":
        superclasses = inner.child_by_field_name("superclasses")
        if superclasses is not None:
            facts.bases = tuple(node_text(b) for b in superclasses.named_children)
        forward, init = method(inner, "forward"), method(inner, "__init__")
        facts.forward_params = tuple(parameters(forward)) if forward is not None else ()
        facts.init_params = tuple(parameters(init)) if init is not None else ()
        hints = [hint for found in forward_methods(inner) for hint in function_hints(found)]
        facts.class_hints = _relative(hints, base)
    else:
        pair = assignment(node)
        if pair is not None:
            left, right = pair
            facts.assign_name = node_text(left)
            facts.assign_string = right.type in ("string", "concatenated_string")
            if is_load_inline(right):
                facts.load_inline = _cuda_items(right, base)
    return facts


def _read_calls(node: Node, facts: Facts) -> None:
    """One walk: the kernel launches it could make, what it calls, the classes it names."""
    calls: list[tuple[str, str]] = []
    callees: set[str] = set()
    class_refs: set[str] = set()
    for call in descendants(node, ("call", "class_definition")):
        if call.type == "class_definition":  # its argument list names the classes it builds on
            superclasses = call.child_by_field_name("superclasses")
            if superclasses is not None:
                class_refs.update(node_text(b) for b in superclasses.named_children)
            continue
        callees.add(call_name(call))
        function = call.child_by_field_name("function")
        if function is None:
            continue
        if function.type == "subscript":
            calls.append(("sub", node_text(function.child_by_field_name("value"))))
        elif function.type == "attribute":
            owner = function.child_by_field_name("object")
            if owner is not None and owner.type == "call":
                calls.append(("call", call_name(owner)))
            elif owner is not None and owner.type == "identifier":
                calls.append(("ident", node_text(owner)))
    facts.calls = tuple(calls)
    facts.launch_keys = frozenset(calls)
    facts.callees = frozenset(callees)
    facts.class_refs = frozenset(class_refs)


def _cuda_items(call: Node, base: int) -> tuple[CudaItem, ...]:
    """The `cuda_sources=` items of a load_inline call: variables, or inline strings."""
    arguments = call.child_by_field_name("arguments")
    if arguments is None:
        return ()
    value = None
    for argument in arguments.named_children:
        if argument.type == "keyword_argument" and def_name(argument) == "cuda_sources":
            value = argument.child_by_field_name("value")
    if value is None:
        return ()
    items = value.named_children if value.type in ("list", "tuple") else [value]
    out: list[CudaItem] = []
    for item in items:
        if item.type == "identifier":
            out.append(("ident", node_text(item)))
        else:
            kernels = global_functions(item)
            rel = tuple((k.name, k.start_line - base, k.end_line - base) for k in kernels)
            out.append(("inline", rel))
    return tuple(out)


def _relative(hints: list[Hint], base: int) -> tuple[RelHint, ...]:
    return tuple(
        (h.start[0] - base, h.start[1], h.end[0] - base, h.end[1], h.message, h.code) for h in hints
    )
