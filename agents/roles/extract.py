"""Pull a ModelNew module or a JSON object out of a model's reply.

Models wrap code in prose, split it over several fences, forget to close the last fence, or
rename the class; each of those would otherwise cost a whole executor call. Extraction only
parses (`ast`, `tokenize`), never runs the code, and every failure is a one-line message.
"""

from __future__ import annotations

import ast
import builtins
import io
import json
import re
import tokenize
from dataclasses import dataclass
from typing import Any

from agents import pyast
from agents.roles.base import Candidate

TARGET = "ModelNew"
PY_LANGS = frozenset({"", "python", "py", "python3", "py3", "ipython", "pytorch", "torch"})
JSON_LANGS = frozenset({"json", "jsonc", "json5"})
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\s]*)[^`]*$")
_CODE_START = re.compile(r"^(import |from \S+ import |class |def |@)")
_BUILTIN_NAMES = frozenset(dir(builtins)) | {"__name__", "__file__", "__doc__", "__spec__"}
_MAX_BRACE_TRIES = 64


class ExtractError(ValueError):
    """Nothing usable in the reply; the message is one line, fit to show the model."""


@dataclass(frozen=True)
class CodeBlock:
    lang: str  # the fence's info word, lowercased ("" for a bare fence)
    text: str
    closed: bool  # False for a fence left open at the end of the reply


def code_blocks(reply: str) -> list[CodeBlock]:
    """Fenced blocks in reply order (``` or ~~~, any indent); an open last fence runs to the end."""
    blocks: list[CodeBlock] = []
    lines = reply.splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        body: list[str] = []
        i += 1
        closed = False
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                closed = True
                i += 1
                break
            body.append(_dedent(lines[i], indent))
            i += 1
        if not closed and body and body[-1].rstrip().endswith(fence):
            body[-1] = body[-1].rstrip()[: -len(fence)]  # "    return y```" at the very end
        blocks.append(CodeBlock(opening["info"].lower(), "\n".join(body).strip("\n"), closed))
    return blocks


def _dedent(line: str, indent: int) -> str:
    """Drop up to the fence's own indentation, as CommonMark does for indented fences."""
    cut = 0
    while cut < indent and cut < len(line) and line[cut] in " \t":
        cut += 1
    return line[cut:]


# -- Python module extraction ------------------------------------------------------------------


def extract_module(reply: str, plan: str = "") -> Candidate:
    """The complete ModelNew module in `reply`, or a Candidate with `source=None` and why.
    Of several blocks that define ModelNew, the one that best matches `plan` (the words it
    shares with the plan's text) wins; on a tie, the later one (a corrected version)."""
    blocks = code_blocks(reply)
    notes: list[str] = []
    if blocks:
        pool = [b for b in blocks if b.lang in PY_LANGS]
        if not pool:  # mislabelled Python ("```python3.11", "```text") still counts
            pool = [b for b in blocks if isinstance(_parse(b.text), ast.Module)]
        if not pool:
            return Candidate(None, error="the reply has no Python code block")
        source = _choose(pool, notes, plan)
        if not blocks[-1].closed and blocks[-1] in pool:
            notes.append("the last code fence was not closed")
    else:
        found = _bare_python(reply)
        if found is None:
            return Candidate(None, error="the reply has no Python code block")
        source = found
        notes.append("the code had no fence")
    return _finish(source, notes)


def _parse(text: str) -> ast.Module | SyntaxError:
    try:
        return pyast.parse(text)
    except SyntaxError as error:
        return error
    except ValueError as error:  # e.g. a null byte
        return SyntaxError(str(error))


def _choose(pool: list[CodeBlock], notes: list[str], plan: str = "") -> str:
    """ModelNew's block (of the complete-looking ones, the best match to `plan`, else the
    last), else a module block, else the longest; blocks it needs names from (imports,
    kernels) are joined in reply order."""
    trees = [_parse(b.text) for b in pool]
    with_target = [i for i, b in enumerate(pool) if _mentions_class(b.text, TARGET, trees[i])]
    with_class = [i for i in with_target if _defines_class(trees[i], TARGET)]
    with_module = [i for i, t in enumerate(trees) if isinstance(t, ast.Module) and _modules(t)]
    chosen_from = with_class or with_target or with_module
    if chosen_from:
        parsed = [i for i in chosen_from if isinstance(trees[i], ast.Module)] or chosen_from
        longest = max(len(pool[i].text) for i in parsed)
        complete = [i for i in parsed if len(pool[i].text) >= longest / 2]
        wanted = _stems(plan)
        main = max(complete, key=lambda i: (len(wanted & _stems(pool[i].text)), i))
        if len(complete) > 1 and wanted and main != complete[-1]:
            notes.append("chose the ModelNew block that matches the plan")
    else:
        main = max(range(len(pool)), key=lambda i: len(pool[i].text))
    tree = trees[main]
    if not isinstance(tree, ast.Module) or len(pool) == 1:
        return pool[main].text
    free = _free_names(tree)
    parts = [main]
    for i, other in enumerate(trees):
        if i == main or i in with_target or not isinstance(other, ast.Module) or not free:
            continue
        provided = _bound_names(other) & free
        if provided:
            parts.append(i)
            free -= provided
    if len(parts) == 1:
        return pool[main].text
    joined = "\n\n".join(pool[i].text for i in sorted(parts))
    if isinstance(_parse(joined), SyntaxError):
        return pool[main].text
    notes.append(f"joined {len(parts)} code blocks")
    return joined


def _defines_class(tree: ast.Module | SyntaxError, name: str) -> bool:
    """A top-level `class name` (not an alias such as `name = Other`)."""
    if not isinstance(tree, ast.Module):
        return False
    return any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body)


_SUFFIXES = ("ing", "ed", "es", "s", "e")


def _stems(text: str) -> set[str]:
    """Lowercased word stems of `text` (identifiers split at _ and camelCase, a plural or
    tense ending cut), three letters or more: enough to see which code a plan talks about."""
    words = re.findall(r"[A-Za-z][A-Za-z0-9]*", text)
    words += re.findall(r"[A-Z][a-z0-9]+", text)  # the parts of camelCase names
    stems = set()
    for word in words:
        word = word.lower()
        for suffix in _SUFFIXES:
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)]
                break
        if len(word) >= 3:
            stems.add(word)
    return stems


def _mentions_class(text: str, name: str, tree: ast.Module | SyntaxError) -> bool:
    if isinstance(tree, ast.Module):
        return name in _top_level_names(tree)
    return re.search(rf"^class\s+{name}\b", text, re.MULTILINE) is not None


def _bare_python(reply: str) -> str | None:
    """Unfenced code: from the first line that starts like code, cutting trailing prose."""
    lines = reply.splitlines()
    start = next((i for i, line in enumerate(lines) if _CODE_START.match(line)), None)
    if start is None:
        return None
    for end in range(len(lines), start, -1):
        if end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t"):
            continue  # cut only before a non-indented line: the prose that follows the code
        text = "\n".join(lines[start:end]).strip("\n")
        tree = _parse(text)
        if isinstance(tree, ast.Module) and any(isinstance(n, ast.ClassDef) for n in tree.body):
            return text
    return None


def _finish(source: str, notes: list[str]) -> Candidate:
    """Check the syntax, make sure `ModelNew` exists, drop dead reference code."""
    tree = _parse(source)
    if isinstance(tree, SyntaxError):
        where = f" at line {tree.lineno}" if tree.lineno else ""
        return Candidate(None, error=f"the code has a syntax error{where}: {tree.msg}")
    if TARGET not in _top_level_names(tree):
        renamed = _adopt_model_class(source, tree, notes)
        if renamed is None:
            return Candidate(
                None, error=f"the reply has no {TARGET} class (no nn.Module subclass in its code)"
            )
        source = renamed
        tree = _parse(source)
        assert isinstance(tree, ast.Module)
    source = _drop_dead_code(source, tree, notes)
    return Candidate(source.rstrip() + "\n", notes="; ".join(notes))


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _modules(tree: ast.Module) -> list[ast.ClassDef]:
    """Top-level classes that derive from nn.Module, directly or through another such class."""
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    found: dict[str, ast.ClassDef] = {}
    changed = True
    while changed:
        changed = False
        for cls in classes:
            if cls.name in found:
                continue
            for base in cls.bases:
                name = ast.unparse(base)
                if name.split(".")[-1] == "Module" or name in found:
                    found[cls.name] = cls
                    changed = True
                    break
    return [c for c in classes if c.name in found]


def _adopt_model_class(source: str, tree: ast.Module, notes: list[str]) -> str | None:
    """Make the reply's model class ModelNew: rename the single top-level nn.Module class, or,
    when several could be it, alias the most likely one (`ModelNew = Name`)."""
    modules = _modules(tree)
    if not modules:
        return None
    helpers = set()
    for cls in modules:
        used = {n.id for n in ast.walk(cls) if isinstance(n, ast.Name)}
        helpers |= {c.name for c in modules if c is not cls and c.name in used}
    tops = [c for c in modules if c.name not in helpers] or modules
    if len(tops) > 1 and any(c.name == "Model" for c in tops):
        tops = [c for c in tops if c.name != "Model"]  # a copy of the reference next to ours
    if len(tops) == 1:
        name = tops[0].name
        notes.append(f"renamed class {name} to {TARGET}")
        return _rename(source, name, TARGET)
    likely = [c for c in tops if "model" in c.name.lower()] or tops
    name = likely[-1].name
    notes.append(f"aliased {TARGET} = {name}")
    return f"{source.rstrip()}\n\n\n{TARGET} = {name}\n"


def _rename(source: str, old: str, new: str) -> str:
    """Rename every identifier token `old` (not strings or comments), keeping the layout."""
    lines = source.splitlines(keepends=True)
    hits = [
        tok.start
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.NAME and tok.string == old
    ]
    for row, col in reversed(hits):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[col + len(old) :]
    return "".join(lines)


def _drop_dead_code(source: str, tree: ast.Module, notes: list[str]) -> str:
    """Remove a copied reference `class Model` nobody uses and `if __name__ == "__main__"`
    test code: the static checker refuses the first, the second would run at import."""
    spans: list[tuple[int, int]] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            end = node.end_lineno or node.lineno
            outside = [
                n
                for n in ast.walk(tree)
                if isinstance(n, ast.Name) and n.id == "Model" and not start <= n.lineno <= end
            ]
            if not outside:
                spans.append((start, end))
                notes.append("dropped an unused copy of the reference class Model")
        elif isinstance(node, ast.If) and _is_main_guard(node.test):
            spans.append((node.lineno, node.end_lineno or node.lineno))
            notes.append('dropped the `if __name__ == "__main__"` block')
    if not spans:
        return source
    lines = source.splitlines(keepends=True)
    for start, end in sorted(spans, reverse=True):
        del lines[start - 1 : end]
    trimmed = re.sub(r"\n{4,}", "\n\n\n", "".join(lines))
    return trimmed if isinstance(_parse(trimmed), ast.Module) else source


def _is_main_guard(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def _bound_names(tree: ast.AST) -> set[str]:
    """Every name the code binds anywhere (assignments, defs, imports, arguments, handlers)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            bound.add(node.name)
    return bound


def _free_names(tree: ast.AST) -> set[str]:
    """Names the code reads but never binds and that are not builtins: what it lacks."""
    names = [n for n in ast.walk(tree) if isinstance(n, ast.Name)]
    loaded = {n.id for n in names if isinstance(n.ctx, ast.Load)}
    return loaded - _bound_names(tree) - _BUILTIN_NAMES


# -- JSON extraction ---------------------------------------------------------------------------


def extract_json(reply: str) -> dict[str, Any]:
    """The reply's JSON object: a ```json block first, then any fence holding an object, then
    the first balanced {...} in the text. Trailing commas, // comments and Python-style
    literals (single quotes, True/None) are tolerated. Raises ExtractError (one line)."""
    blocks = code_blocks(reply)
    texts = [b.text for b in blocks if b.lang in JSON_LANGS]
    texts += [b.text for b in blocks if b.lang not in JSON_LANGS and b.text.lstrip()[:1] == "{"]
    spans = [span for text in texts for span in (text, *_balanced_objects(text))]
    errors: list[tuple[int, str]] = []  # the longest failed span explains the failure best
    for span in [*spans, *_balanced_objects(reply)]:
        try:
            return _load_object(span)
        except ExtractError as error:
            errors.append((len(span), str(error)))
    raise ExtractError(max(errors)[1] if errors else "the reply has no JSON object")


def _load_object(text: str) -> dict[str, Any]:
    text = text.strip()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        value = None
        message = f"invalid JSON ({error.msg} at line {error.lineno} column {error.colno})"
        try:
            value = json.loads(_relax(text))
        except json.JSONDecodeError:
            try:
                value = pyast.literal_eval(text)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                raise ExtractError(message) from None
    if not isinstance(value, dict):
        raise ExtractError(f"the JSON is a {type(value).__name__}, not an object")
    return value


def _relax(text: str) -> str:
    """Drop // comments and trailing commas outside strings."""
    out: list[str] = []
    i, in_string = 0, False
    while i < len(text):
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif text.startswith("//", i):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        elif ch == ",":
            rest = text[i + 1 :].lstrip()
            if not rest[:1] or rest[0] not in "}]":
                out.append(ch)
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _balanced_objects(text: str) -> list[str]:
    """Outermost {...} spans, string-aware (both quote kinds inside an object), in order."""
    spans: list[str] = []
    start = text.find("{")
    tries = 0
    while start != -1 and tries < _MAX_BRACE_TRIES:
        tries += 1
        end = _match_brace(text, start)
        if end is None:
            start = text.find("{", start + 1)
            continue
        spans.append(text[start : end + 1])
        start = text.find("{", end + 1)
    return spans


def _match_brace(text: str, start: int) -> int | None:
    depth, quote, i = 0, "", start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote or (ch == "\n" and quote == "'"):
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None
