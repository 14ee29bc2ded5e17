"""Targets and hints of a document, re-read only where an edit changed it.

A 5 MB file has thousands of top-level statements; reading them all after each keystroke
took seconds. The analysis keeps each statement's `Facts` with its position; after an edit
only the statements inside the document's dirty region (the edited bytes plus the ranges
tree-sitter reports as reshaped, `ParsedDocument.take_dirty`) are read again, those after it move
by the edit's byte and row deltas, and the targets and hints are joined from the facts as
for a whole tree. Where the new tree's statements do not line up with the kept ones the
analysis starts over, so its results are always those of a fresh read (tests check it).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Protocol

from tree_sitter import Node, Tree

from agents.targets.facts import CudaItem, Facts, facts_of
from agents.targets.hints import Hint, unique_hints
from agents.targets.model import HARNESS, MODULE_BASES, Kernel, Target
from agents.targets.snippets import missing_init, missing_inputs, orphan_target
from agents.targets.syntax import Dirty


class ParsedDocument(Protocol):
    """What the analysis reads of an open document: its settled tree, and what changed in
    it since the last look (`Dirty`, None for nothing, True when it was rebuilt whole)."""

    @property
    def root(self) -> Node: ...

    def take_dirty(self) -> Dirty | bool | None: ...


class Entry:
    """One top-level statement: where it is now, and its facts."""

    __slots__ = ("end_byte", "facts", "row", "start_byte")

    def __init__(self, start_byte: int, end_byte: int, row: int, facts: Facts) -> None:
        self.start_byte = start_byte
        self.end_byte = end_byte
        self.row = row
        self.facts = facts


class Result:
    """A version's targets, and its hints, joined on first use (code lenses need none)."""

    def __init__(self, targets: list[Target], hints: Callable[[], list[Hint]]) -> None:
        self.targets = targets
        self._hints: Callable[[], list[Hint]] | list[Hint] = hints

    @property
    def hints(self) -> list[Hint]:
        if callable(self._hints):
            self._hints = self._hints()
        return self._hints


def _entry(node: Node) -> Entry:
    return Entry(node.start_byte, node.end_byte, node.start_point.row, facts_of(node))


class Analysis:
    """The incremental analysis of one document."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.result: Result | None = None
        self.full_reads = 0  # how often it had to read every statement

    def refresh(self, doc: ParsedDocument) -> Result:
        dirty = doc.take_dirty()
        if self.result is not None and dirty is None:
            return self.result
        root = doc.root
        if dirty is True or self.result is None or not self._patch(root, dirty):
            self.entries = [_entry(node) for node in root.named_children]
            self.full_reads += 1
        self.result = join(self.entries, root.named_child)
        return self.result

    def _patch(self, root: Node, dirty: Dirty | bool | None) -> bool:
        """Re-read the statements in the dirty region; False when they do not line up."""
        if not isinstance(dirty, Dirty):
            return False
        entries = self.entries
        old_hi, old_hi_row = dirty.hi - dirty.byte_delta, dirty.hi_row - dirty.row_delta
        first = bisect_left(entries, dirty.lo, key=lambda e: e.end_byte)
        after = bisect_right(entries, old_hi, key=lambda e: e.start_byte)
        while after < len(entries) and entries[after].row <= old_hi_row:
            after += 1
        first = min(first, after)
        stop = entries[after].start_byte + dirty.byte_delta if after < len(entries) else None
        floor = entries[first - 1].end_byte if first else 0
        middle: list[Entry] = []
        node = root.named_child(first) if first < root.named_child_count else None
        while node is not None and (stop is None or node.start_byte < stop):
            if node.start_byte < floor:
                return False
            middle.append(_entry(node))
            node = node.next_named_sibling
        kept = len(entries) - after
        if root.named_child_count != first + len(middle) + kept:
            return False
        if kept:
            next_entry = entries[after]
            if (
                node is None
                or node.start_byte != next_entry.start_byte + dirty.byte_delta
                or node.end_byte != next_entry.end_byte + dirty.byte_delta
                or node.start_point.row != next_entry.row + dirty.row_delta
            ):
                return False
        delta, row_delta = dirty.byte_delta, dirty.row_delta
        for entry in entries[after:] if delta or row_delta else ():
            entry.start_byte += delta
            entry.end_byte += delta
            entry.row += row_delta
        self.entries = entries[:first] + middle + entries[after:]
        return True


def full_analysis(tree_or_root: Tree | Node) -> Result:
    """Targets and hints of a whole tree, read from scratch."""
    root = tree_or_root.root_node if isinstance(tree_or_root, Tree) else tree_or_root
    children = root.named_children
    return join([_entry(node) for node in children], children.__getitem__)


def join(entries: list[Entry], node_at: Callable[[int], Node | None]) -> Result:
    """Targets and hints from the facts of every statement (`node_at(i)`: statement i, for
    what is read only on demand: CUDA strings, the hints of functions that became targets)."""
    functions: dict[str, int] = {}
    classes: dict[str, int] = {}
    triton: dict[str, int] = {}
    strings: dict[str, int] = {}
    hot: list[tuple[int, int, Facts]] = []  # (row, index, facts) of code that may be hot
    extensions: list[Entry] = []  # the statements that build a load_inline extension
    for index, entry in enumerate(entries):
        facts = entry.facts
        if facts.inner_type == "function_definition":
            functions[facts.name] = index
            hot.append((entry.row, index, facts))
        elif facts.inner_type == "class_definition":
            classes[facts.name] = index
            if facts.class_hints:
                hot.append((entry.row, index, facts))
        if facts.is_triton:
            triton[facts.name] = index
        if facts.assign_name is not None and facts.assign_string:
            strings[facts.assign_name] = index
        if facts.load_inline is not None:
            extensions.append(entry)
    kernels_of = _KernelFinder(entries, node_at, triton, strings, extensions)
    modules = _module_classes(entries, classes)
    has_inputs, has_init = "get_inputs" in functions, "get_init_inputs" in functions
    targets: list[Target] = []
    module_targets = _module_targets(entries, modules) if (has_inputs or has_init) else []
    for index in module_targets:
        facts = entries[index].facts
        missing, snippet = None, None
        if not has_inputs:
            missing, snippet = missing_inputs(
                facts.name, list(facts.forward_params), "module", f"{facts.name}()"
            )
        elif not has_init:
            missing, snippet = missing_init(facts.name, list(facts.init_params))
        targets.append(_target(entries[index], "module", kernels_of(index), missing, snippet))
    inside = [(entries[i].start_byte, entries[i].end_byte) for i in module_targets]
    launched: set[str] = set()
    for name, index in functions.items():
        if name in HARNESS or name in triton:
            continue
        kernels = kernels_of(index)
        if not kernels:
            continue
        launched.update(k.name for k in kernels)
        languages = {k.language for k in kernels}
        kind = "triton" if "triton" in languages else "cuda" if "cuda" in languages else "function"
        params = entries[index].facts.params
        missing, snippet = None, None
        if not has_inputs:
            missing, snippet = missing_inputs(name, list(params), kind, f"{name}(...)")
        targets.append(_target(entries[index], kind, kernels, missing, snippet, params))
    for index in module_targets:
        launched.update(k.name for k in kernels_of(index))
    for name, index in triton.items():
        entry = entries[index]
        if name in launched or any(s <= entry.start_byte < e for s, e in inside):
            continue
        missing, snippet = orphan_target(name, list(entry.facts.params))
        targets.append(_target(entry, "triton", [], missing, snippet))
    targets.sort(key=lambda t: t.start_line)
    return Result(targets, lambda: _hints(hot, node_at, targets))


class _KernelFinder:
    """The kernels a statement launches (from their facts)."""

    def __init__(
        self,
        entries: list[Entry],
        node_at: Callable[[int], Node | None],
        triton: dict[str, int],
        strings: dict[str, int],
        builders: list[Entry],
    ) -> None:
        self.entries, self.node_at, self.triton, self.strings = entries, node_at, triton, strings
        self.extensions: list[tuple[str, bool, list[Kernel]]] = []
        for entry in builders:
            facts = entry.facts
            assert facts.load_inline is not None
            if facts.assign_name is not None:
                handle, via_call = facts.assign_name, False
            elif facts.inner_type == "function_definition":
                handle, via_call = facts.name, True
            else:
                continue
            self.extensions.append((handle, via_call, self._cuda(entry, facts.load_inline)))
        self.handles = {(via_call, handle) for handle, via_call, _ in self.extensions}
        self.keys = {("call" if via_call else "ident", handle) for via_call, handle in self.handles}
        self.keys.update(("sub", name) for name in triton)

    def _cuda(self, entry: Entry, items: tuple[CudaItem, ...]) -> list[Kernel]:
        kernels: list[Kernel] = []
        for kind, value in items:
            if kind == "inline":
                owner, found = entry, value
            else:
                index = self.strings.get(str(value))
                if index is None:
                    continue
                owner = self.entries[index]
                found = owner.facts.string_kernels(lambda i=index: self._node(i))
            for name, start, end in found:  # type: ignore[union-attr]
                kernels.append(Kernel(name, "cuda", owner.row + start, owner.row + end))
        return kernels

    def _node(self, index: int) -> Node:
        node = self.node_at(index)
        assert node is not None
        return node

    def __call__(self, index: int) -> list[Kernel]:
        facts = self.entries[index].facts
        if not self.keys or self.keys.isdisjoint(facts.launch_keys):
            return []
        found: dict[str, Kernel] = {}
        for kind, name in facts.calls:
            if kind == "sub":
                if name in self.triton and name not in found:
                    kernel = self.entries[self.triton[name]]
                    found[name] = Kernel(
                        name, "triton", kernel.row, kernel.row + kernel.facts.inner_end_row
                    )
                continue
            if (kind == "call", name) not in self.handles:
                continue
            for handle, via_call, kernels in self.extensions:
                if handle == name and via_call == (kind == "call"):
                    for kernel in kernels:
                        found.setdefault(f"cuda:{kernel.name}", kernel)
                    if not kernels:  # a C++ (CPU) extension: no kernel lines to point at
                        found.setdefault(f"ext:{handle}", Kernel(handle, "cpp", -1, -1))
        return list(found.values())


def _module_classes(entries: list[Entry], classes: dict[str, int]) -> dict[str, int]:
    """Classes that derive from nn.Module, directly or through another one here (when the
    file has a `Model` module, only it: it is the target, and the others are not needed)."""
    known: dict[str, bool] = {}

    def is_module(name: str) -> bool:
        if name not in known:
            known[name] = False  # a cycle of classes derives from nothing
            bases = entries[classes[name]].facts.bases
            known[name] = any(b in MODULE_BASES or (b in classes and is_module(b)) for b in bases)
        return known[name]

    if "Model" in classes and is_module("Model"):
        return {"Model": classes["Model"]}
    return {name: index for name, index in classes.items() if is_module(name)}


def _module_targets(entries: list[Entry], modules: dict[str, int]) -> list[int]:
    """`Model` when present; otherwise the module classes no other module class builds."""
    if "Model" in modules:
        return [modules["Model"]]
    used: set[str] = set()
    for name, index in modules.items():
        facts = entries[index].facts
        used.update(callee for callee in facts.callees if callee in modules and callee != name)
        used.update(facts.class_refs)
    return [index for name, index in modules.items() if name not in used]


def _target(
    entry: Entry,
    kind: str,
    kernels: list[Kernel],
    missing: str | None,
    snippet: str | None,
    params: tuple[str, ...] = (),
) -> Target:
    facts = entry.facts
    return Target(
        name=facts.name,
        kind=kind,
        start_line=entry.row,
        end_line=entry.row + facts.end_row,
        name_line=entry.row + facts.name_row,
        start_byte=entry.start_byte,
        end_byte=entry.end_byte,
        kernels=tuple(kernels),
        missing=missing,
        snippet=snippet,
        params=params,
    )


def _hints(
    hot: list[tuple[int, int, Facts]],
    node_at: Callable[[int], Node | None],
    targets: list[Target],
) -> list[Hint]:
    """The hints of hot code: every class's forward, and the functions that are targets
    (`hot`: the classes and functions, with their rows in this version)."""
    names = {t.name for t in targets if t.kind != "module"}
    hints: list[Hint] = []
    for row, index, facts in hot:
        if facts.inner_type == "class_definition":
            found = facts.class_hints
        elif facts.name in names:
            found = facts.function_hints(lambda i=index: node_at(i))  # type: ignore[misc]
        else:
            continue
        hints.extend(
            Hint((row + a, b), (row + c, d), message, code) for a, b, c, d, message, code in found
        )
    return unique_hints(hints)
