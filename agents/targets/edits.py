"""Turning a verified rewrite into an edit of the user's file, or refusing to.

The rewrite is a whole module (imports, helpers, `class ModelNew`) written against a snapshot
of the document. Accepting it must never overwrite what the user typed since: the target is
re-found by name and compared with the snapshot, and any difference refuses the edit.

- "replace" (a `Model` target): the `Model` class becomes the rewrite's `ModelNew`, renamed
  `Model`; imports the rewrite needs join the user's imports and its helpers go just above
  the class. `get_inputs` and everything else of the user's stays as it is.
- "alongside": the rewrite is added after the target as `<Name>New` (a module), or, for a
  function target, as `<name>_optimized(...)`, which runs the verified `ModelNew`.

Helpers identical to the user's are reused; a helper that differs under a name the user
already has is renamed (`<name>_opt`), so nothing of the user's changes meaning.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from tree_sitter import Node

from agents import pyast
from agents.speedup_words import speedup_summary, speedup_text
from agents.targets.find import find_definition
from agents.targets.model import HARNESS, Target
from agents.targets.syntax import node_text, parse_text, top_level
from agents.targets.synth import parameters_and_call

IMPORTS = ("import_statement", "import_from_statement", "future_import_statement")


class EditRefused(Exception):
    """The rewrite cannot be applied as it stands; one line the user can act on."""


@dataclass(frozen=True)
class Rewrite:
    """A verified rewrite waiting for the user's decision."""

    job_id: str
    uri: str
    target: str
    target_kind: str
    snapshot: str  # the document when the job started
    source: str  # the rewrite module: defines ModelNew
    speedup: float
    device: str = "cpu"
    confirmed: bool = True
    methods: tuple[str, ...] = ()
    speedup_ci: tuple[float, float] | None = None
    candidates: str = ""  # the search's candidates in one line ("7 candidates: 1 chosen, ...")

    @property
    def summary(self) -> str:
        """ "2.31x faster, verified" (with "not re-measured" after a cancelled search): the
        lens, the notification, the hover and the job's last message all say it so."""
        return speedup_summary(self.speedup, self.confirmed)


@dataclass(frozen=True)
class TextChange:
    """Replace [start, end) with `text`; positions are (line, string index in the line)."""

    start: tuple[int, int]
    end: tuple[int, int]
    text: str


@dataclass
class AcceptPlan:
    changes: list[TextChange]
    mode: str  # the mode actually used
    new_name: str  # what the rewrite is called in the file
    note: str = ""  # why the mode differs from the setting, if it does
    renamed: dict[str, str] = field(default_factory=dict)
    call_name: str = ""  # what a caller uses: `new_name`, or a function target's wrapper


def effective_mode(rewrite: Rewrite, mode: str) -> tuple[str, str]:
    """Only the file's `Model` can be replaced in place; other targets get "alongside"."""
    if mode == "replace" and not (rewrite.target_kind == "module" and rewrite.target == "Model"):
        return "alongside", (
            f"`{rewrite.target}` is not the file's Model, so the rewrite is added alongside it"
        )
    return mode, ""


def check_unchanged(text: str, rewrite: Rewrite) -> Target:
    """The target in `text`, refusing when it differs from the snapshot's."""
    kind = rewrite.target_kind
    current = find_definition(parse_text(text).root_node, rewrite.target, kind)
    if current is None:
        raise EditRefused(
            f"`{rewrite.target}` is no longer in the file, so the rewrite was not applied; "
            "run Optimize again"
        )
    snap = find_definition(parse_text(rewrite.snapshot).root_node, rewrite.target, kind)
    now_text = text.encode("utf-8")[current.start_byte : current.end_byte]
    then_text = rewrite.snapshot.encode("utf-8")[snap.start_byte : snap.end_byte] if snap else b""
    if now_text != then_text:
        raise EditRefused(
            f"`{rewrite.target}` changed since it was optimised; the rewrite was not applied "
            "so that your edits are kept. Run Optimize again on the new code."
        )
    return current


def build_accept(text: str, rewrite: Rewrite, mode: str) -> AcceptPlan:
    """The changes that accept `rewrite` into `text` (EditRefused when they cannot)."""
    target = check_unchanged(text, rewrite)
    mode, note = effective_mode(rewrite, mode)
    doc_root = parse_text(text).root_node
    doc = _Module(doc_root)
    source = _undo_synth_renames(rewrite.source, doc.names)
    rw = _Module(parse_text(source).root_node)
    if "ModelNew" not in rw.classes:
        raise EditRefused("the rewrite defines no ModelNew class; nothing to apply")
    taken = set(doc.names) | (set(rw.names) - {"ModelNew"})
    if mode == "replace":
        new_name = rewrite.target
    elif target.kind == "module":
        new_name = _fresh(f"{rewrite.target}New", taken)
    else:
        new_name = _fresh(f"_{_camel(rewrite.target)}Optimized", taken)
    taken.add(new_name)
    helpers, renames, needed = _helpers(
        rw, doc, taken, rewrite.target if mode == "replace" else None
    )
    renames["ModelNew"] = new_name
    class_text = rename_identifiers(rw.classes["ModelNew"], renames)
    helper_texts = [rename_identifiers(h, renames) for h in helpers]
    header = (
        f"# Rewritten by kernel-agent: {rewrite.summary} on {rewrite.device}"
        + (f" ({', '.join(rewrite.methods)})" if rewrite.methods else "")
        + "."
    )
    if target.kind == "module" and mode == "alongside":
        header += f"\n# Drop-in for {rewrite.target}: same constructor and forward arguments" + (
            "; it loads its state_dict."
            if rewrite.target == "Model"
            else f"; load a {rewrite.target}'s weights under the prefix 'inner.'."
        )
    blocks = [*helper_texts, header + "\n" + class_text]
    if target.kind != "module":
        wrapper, call_name = _function_wrapper(text, target, new_name, rewrite, taken)
        blocks.append(wrapper)
    else:
        call_name = new_name
    body = "\n\n\n".join(block.strip("\n") for block in blocks) + "\n"
    lines = text.split("\n")
    changes: list[TextChange] = []
    imports = [
        text
        for text, names in rw.imports
        if _norm(text) not in doc.import_texts and (not names or names & needed)
    ]
    if imports:
        changes.append(_import_change(doc, lines, imports))
    if mode == "replace":
        end = (target.end_line + 1, 0) if target.end_line + 1 < len(lines) else None
        if end is None:
            changes.append(
                TextChange(
                    (target.start_line, 0), (target.end_line, len(lines[-1])), body.rstrip("\n")
                )
            )
        else:
            changes.append(TextChange((target.start_line, 0), end, body))
    else:
        last = lines[target.end_line]
        changes.append(
            TextChange(
                (target.end_line, len(last)),
                (target.end_line, len(last)),
                "\n\n\n" + body.rstrip("\n"),
            )
        )
    renamed = {k: v for k, v in renames.items() if k != "ModelNew"}
    return AcceptPlan(changes, mode, new_name, note, renamed, call_name)


def apply_changes(text: str, changes: list[TextChange]) -> str:
    """`text` with non-overlapping `changes` applied (for diffs and tests)."""
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def index(position: tuple[int, int]) -> int:
        line, column = position
        if line >= len(lines):
            return len(text)
        return starts[line] + min(column, len(lines[line]))

    out = text
    for change in sorted(changes, key=lambda c: index(c.start), reverse=True):
        out = out[: index(change.start)] + change.text + out[index(change.end) :]
    return out


# --- module parts ---------------------------------------------------------------------------


class _Module:
    """A module's top level: imports, classes by name, other statements with their names."""

    def __init__(self, root: Node):
        self.imports: list[tuple[str, set[str]]] = []
        self.import_texts: set[str] = set()
        self.classes: dict[str, str] = {}
        self.statements: list[tuple[str, set[str], Node]] = []  # (text, names, node)
        self.names: dict[str, str] = {}  # name → normalized text of the statement binding it
        self.texts: set[str] = set()
        self.docstring_end: int | None = None
        self.last_import_line: int | None = None
        self.future_end: int | None = None
        pending_comments: list[Node] = []
        nodes = top_level(root)
        for index, node in enumerate(nodes):
            if node.type == "comment":
                pending_comments.append(node)
                continue
            text = _with_comments(node, pending_comments)
            pending_comments = []
            if _is_docstring(node):  # a bare string: documentation, never code to carry
                if index == 0:
                    self.docstring_end = node.end_point.row
                continue
            if node.type in IMPORTS:
                self.imports.append((node_text(node), _import_names(node)))
                self.import_texts.add(_norm(node_text(node)))
                self.last_import_line = node.end_point.row
                if node.type == "future_import_statement":
                    self.future_end = node.end_point.row
                for name in _import_names(node):
                    self.names.setdefault(name, _norm(node_text(node)))
                continue
            if node.type == "if_statement" and "__name__" in node_text(
                node.child_by_field_name("condition")
            ):
                continue
            inner = (
                node.child_by_field_name("definition")
                if node.type == "decorated_definition"
                else node
            )
            names = _bound_names(inner if inner is not None else node)
            if inner is not None and inner.type == "class_definition":
                self.classes[node_text(inner.child_by_field_name("name"))] = text
            for name in names:
                self.names[name] = _norm(text)
            self.texts.add(_norm(text))
            self.statements.append((text, names, node))


def _with_comments(node: Node, comments: list[Node]) -> str:
    """A statement's text with the comment lines right above it."""
    kept: list[Node] = []
    row = node.start_point.row
    for comment in reversed(comments):
        if comment.end_point.row == row - 1 and comment.start_point.column == 0:
            kept.insert(0, comment)
            row = comment.start_point.row
        else:
            break
    return "\n".join([node_text(c) for c in kept] + [node_text(node)])


def _is_docstring(node: Node) -> bool:
    return (
        node.type == "expression_statement"
        and node.named_child_count == 1
        and node.named_children[0].type == "string"
    )


def _import_names(node: Node) -> set[str]:
    names: set[str] = set()
    for child in node.named_children:
        if child.type == "aliased_import":
            names.add(node_text(child.child_by_field_name("alias")))
        elif child.type == "dotted_name" and child != node.child_by_field_name("module_name"):
            names.add(node_text(child).split(".")[0])
    return names


def _bound_names(node: Node) -> set[str]:
    """Names a top-level statement binds (definitions and assignments, not in functions)."""
    if node.type in ("function_definition", "class_definition"):
        return {node_text(node.child_by_field_name("name"))}
    names: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type in ("function_definition", "class_definition"):
            names.add(node_text(current.child_by_field_name("name")))
            continue
        if current.type in ("assignment", "augmented_assignment"):
            left = current.child_by_field_name("left")
            if left is not None:
                if left.type == "identifier":
                    names.add(node_text(left))
                elif left.type in ("pattern_list", "tuple_pattern", "list_pattern"):
                    names.update(
                        node_text(c) for c in left.named_children if c.type == "identifier"
                    )
        stack.extend(current.named_children)
    return names


def _norm(text: str) -> str:
    return " ".join(text.split())


def _fresh(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}{n}", n + 1
    return candidate


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Target"


def _helpers(
    rw: _Module, doc: _Module, taken: set[str], replaced: str | None
) -> tuple[list[str], dict[str, str], set[str]]:
    """The rewrite's statements that ModelNew needs and the file lacks; those that bind a
    name the user already uses for something else are renamed."""
    excluded = {"Model", "ModelNew", "UserModel", "UserModelNew", *HARNESS}
    candidates = [(t, n) for t, n, _ in rw.statements if not n & excluded]
    needed = identifiers(rw.classes["ModelNew"])
    reachable: list[tuple[str, set[str]]] = []
    grew = True
    while grew:
        grew = False
        for text, names in candidates:
            if any(text is r[0] for r in reachable):
                continue
            if not names or names & needed:
                reachable.append((text, names))
                needed |= identifiers(text)
                grew = True
    reachable.sort(key=lambda item: next(i for i, c in enumerate(candidates) if c[0] is item[0]))
    renames: dict[str, str] = {}
    added = True
    while added:
        added = False
        for text, names in reachable:
            if _norm(rename_identifiers(text, renames)) in doc.texts:
                continue
            for name in sorted(names):
                if name in renames or name not in doc.names or name == replaced:
                    continue
                renames[name] = _fresh(f"{name}_opt", taken)
                taken.add(renames[name])
                added = True
    kept = []
    for text, _names in reachable:
        renamed = rename_identifiers(text, renames)
        if _norm(renamed) not in doc.texts:
            kept.append(renamed)
    return kept, renames, needed


def identifiers(text: str) -> set[str]:
    """Every identifier `text` mentions (attribute names excluded)."""
    found: set[str] = set()
    stack = [parse_text(text).root_node]
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.type == "identifier" and not _is_attribute_name(node):
            found.add(node_text(node))
    return found


def _is_attribute_name(node: Node) -> bool:
    """`b` in `a.b`: a field name, not a reference to a variable."""
    parent = node.parent
    return (
        parent is not None
        and parent.type == "attribute"
        and parent.child_by_field_name("attribute") == node
    )


def _is_keyword_name(node: Node) -> bool:
    """`k` in `f(k=v)`: a parameter name, not a reference to a variable."""
    parent = node.parent
    return (
        parent is not None
        and parent.type == "keyword_argument"
        and parent.child_by_field_name("name") == node
    )


def rename_identifiers(text: str, renames: dict[str, str]) -> str:
    """Rename whole identifiers (not attribute names, keyword names, strings or comments)."""
    if not renames:
        return text
    data = text.encode("utf-8")
    tree = parse_text(text)
    spans: list[tuple[int, int, str]] = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.type != "identifier":
            continue
        name = node_text(node)
        if name not in renames:
            continue
        if _is_attribute_name(node) or _is_keyword_name(node):
            continue
        spans.append((node.start_byte, node.end_byte, renames[name]))
    for start, end, new in sorted(spans, reverse=True):
        data = data[:start] + new.encode("utf-8") + data[end:]
    return data.decode("utf-8")


def _undo_synth_renames(source: str, doc_names: dict[str, str]) -> str:
    """The problem synthesiser renames the user's `Model`/`ModelNew` to `UserModel...`;
    give them their names back so that the user's own classes are recognised."""
    renames = {}
    for name in ("Model", "ModelNew"):
        synthetic = f"User{name}"
        if name in doc_names and synthetic not in doc_names and synthetic in source:
            renames[synthetic] = name
    return rename_identifiers(source, renames)


def _import_change(doc: _Module, lines: list[str], imports: list[str]) -> TextChange:
    """New imports go after the user's last import (futures first, as Python requires)."""
    futures = [i for i in imports if i.startswith("from __future__")]
    others = [i for i in imports if not i.startswith("from __future__")]
    if futures and doc.future_end is None:
        after = doc.docstring_end
        text = "\n".join(futures + others) + "\n"
        if after is None:
            return TextChange((0, 0), (0, 0), text)
        return TextChange((after + 1, 0), (after + 1, 0), text)
    after = doc.last_import_line if doc.last_import_line is not None else doc.docstring_end
    text = "\n".join(others) + "\n"
    if after is None:
        return TextChange((0, 0), (0, 0), text)
    if after + 1 >= len(lines):
        return TextChange(
            (after, len(lines[after])), (after, len(lines[after])), "\n" + text.rstrip("\n")
        )
    return TextChange((after + 1, 0), (after + 1, 0), text)


def _function_wrapper(
    text: str, target: Target, class_name: str, rewrite: Rewrite, taken: set[str]
) -> tuple[str, str]:
    """`<name>_optimized(...)`: the target's own signature, running the verified ModelNew
    (its text, and its name)."""
    header = text.encode("utf-8")[target.start_byte : target.end_byte].decode("utf-8", "replace")
    params, call = _signature(header, rewrite.target)
    name = _fresh(f"{rewrite.target}_optimized", taken)
    taken.add(name)
    instance = _fresh(f"_{rewrite.target}_optimized_model", taken)
    taken.add(instance)
    return (
        f"{instance} = None\n\n\n"
        f"def {name}({params}):\n"
        f'    """`{rewrite.target}`, rewritten by kernel-agent: same arguments and result '
        f"(verified on get_inputs()),\n"
        f'    {speedup_text(rewrite.speedup)} faster on {rewrite.device}."""\n'
        f"    global {instance}\n"
        f"    if {instance} is None:\n"
        f"        {instance} = {class_name}()\n"
        f"    return {instance}({call})\n"
    ), name


def _signature(definition: str, name: str) -> tuple[str, str]:
    """The parameter list of `def name(...)` and the call passing each parameter on."""
    try:
        module = pyast.parse(definition)
    except SyntaxError:
        return "*args", "*args"
    function = next(
        (n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == name), None
    )
    if function is None:
        return "*args", "*args"
    return parameters_and_call(function.args)
