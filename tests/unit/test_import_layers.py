"""The allowed direction of imports between packages, and no import cycles, read from the code.

Why: layering that lives only in a document drifts (issue 33 found `agents/cli.py` importing
`server.serve` and `memory/gate.py` importing `agents.profile`, and six cycles). This test parses
every module of `agents/`, `server/` and `memory/` with `ast` and reads every import in it, at
module level and inside functions alike (a deferred import is still a dependency), so a new
crossing or cycle fails here with the importing line named. Imports under `if TYPE_CHECKING:`
count too: issue 33 counts `server/app.py` <-> `server/features/*` as a cycle.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("agents", "server", "memory")
# The scripts and checks around the product: they import it, never the other way.
AROUND = ("bench", "tests", "examples")

# What each package must never import, at any depth (ARCHITECTURE.md quotes this table).
# memory/ is the bottom layer: stores, features and gates over plain data. agents/ is the engine
# (CLI, search, evaluation, sandbox) and never reaches into the editor's protocol shell. server/
# is the top: the pygls app may import agents/ and memory/. None of them imports bench/, tests/
# or examples/.
NEVER_IMPORTS: dict[str, tuple[str, ...]] = {
    "memory": ("agents", "server", *AROUND),
    "agents": ("server", *AROUND),
    "server": AROUND,
}

# Inside agents/: what a subpackage (or module) must never import (ARCHITECTURE.md's table).
# The sandbox is the floor every evaluation stands on; the verdict must not depend on the
# search, the roles or the offline passes it judges; the CLI is a leaf nothing else imports.
_AGENTS_ENGINE = ("agents.search", "agents.roles", "agents.llm", "agents.offline")
INNER_NEVER_IMPORTS: dict[str, tuple[str, ...]] = {
    "agents.sandbox": tuple(
        f"agents.{name}"
        for name in (
            "verify",
            "evaluate",
            "evalpool",
            "search",
            "roles",
            "llm",
            "offline",
            "profile",
            "request",
            "targets",
            "cli",
            "bench",
        )
    ),
    "agents.verify": (*_AGENTS_ENGINE, "agents.evalpool", "agents.cli", "agents.targets"),
    "agents.evaluate": (*_AGENTS_ENGINE, "agents.evalpool", "agents.cli", "agents.targets"),
    "agents.offline": ("agents.verify", "agents.search", "agents.cli", "agents.request"),
    "agents.targets": ("agents.sandbox", "agents.verify", "agents.evaluate", "agents.cli"),
    "agents.request": ("agents.cli",),
    "agents": ("agents.cli",),
}
"""Checked longest prefix first; `agents.cli` and `agents.__main__` may import the CLI."""
CLI_IMPORTERS = ("agents.cli", "agents.__main__")


@dataclass(frozen=True)
class Import:
    """One import statement's target, resolved to a module of this repository."""

    importer: str
    target: str
    line: int

    def where(self) -> str:
        return f"{module_path(self.importer)}:{self.line}"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_path(name: str) -> str:
    base = ROOT.joinpath(*name.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    return str(path.relative_to(ROOT))


def repo_modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[module_name(path)] = path
    return found


def deepest_module(dotted: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of `dotted` that is a module here (`a.b.NAME` -> `a.b`)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        if name in modules:
            return name
    return None


def absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> Iterator[Import]:
    """Every import in the module, function-level ones included, that names a repo module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            dotted = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = absolute(node, name, is_package)
            dotted = [f"{source}.{alias.name}" for alias in node.names] or [source]
        else:
            continue
        for each in dotted:
            top = each.split(".")[0]
            target = deepest_module(each, modules) if top in PACKAGES else None
            if target is not None and target != name:
                yield Import(name, target, node.lineno)
            elif top in PACKAGES + AROUND and target is None:
                yield Import(name, each, node.lineno)  # a crossing even if the name is gone


def import_graph() -> list[Import]:
    modules = repo_modules()
    return [edge for name, path in modules.items() for edge in imports_of(name, path, modules)]


def layer_violations(edges: list[Import]) -> list[str]:
    found = []
    for edge in edges:
        package = edge.importer.split(".")[0]
        if edge.target.split(".")[0] in NEVER_IMPORTS[package]:
            found.append(f"{edge.where()}: {edge.importer} imports {edge.target}")
    return found


def inner_violations(edges: list[Import]) -> list[str]:
    found = []
    for edge in edges:
        importer = edge.importer
        if not importer.startswith("agents") or _within(importer, CLI_IMPORTERS):
            continue
        rule = max((k for k in INNER_NEVER_IMPORTS if _within(importer, (k,))), key=len)
        if _within(edge.target, INNER_NEVER_IMPORTS[rule]):
            found.append(f"{edge.where()}: {importer} imports {edge.target} ({rule} must not)")
    return found


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components, iteratively (the graph has hundreds of modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def shortest_cycle(start: str, graph: dict[str, set[str]], members: set[str]) -> list[str]:
    """A shortest path start -> ... -> start inside one component, for the failure message."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph.get(node, ()) & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return [start]


def import_cycles(edges: list[Import]) -> list[str]:
    graph: dict[str, set[str]] = {}
    lines: dict[tuple[str, str], int] = {}
    for edge in edges:
        graph.setdefault(edge.importer, set()).add(edge.target)
        lines.setdefault((edge.importer, edge.target), edge.line)
    cycles = []
    for component in strongly_connected(graph):
        path = shortest_cycle(component[0], graph, set(component))
        steps = [f"{a} (line {lines[a, b]})" for a, b in itertools.pairwise(path)]
        tangled = ", ".join(component)
        cycles.append(" -> ".join([*steps, path[-1]]) + f"  [all tangled: {tangled}]")
    return cycles


def test_no_package_imports_what_its_layer_forbids():
    violations = layer_violations(import_graph())
    assert not violations, "imports against the layers:\n" + "\n".join(violations)


def test_no_agents_package_imports_what_its_place_forbids():
    violations = inner_violations(import_graph())
    assert not violations, "imports against agents' inner layers:\n" + "\n".join(violations)


def test_the_inner_rules_can_fail():
    edges = [
        Import("agents.sandbox.launch", "agents.verify.judge", 3),
        Import("agents.verify.judge", "agents.search.beam", 4),
        Import("agents.search.beam", "agents.cli.optimize", 5),
        Import("agents.cli.optimize", "agents.search.beam", 6),
        Import("agents.verify.judge", "agents.sandbox.launch", 7),
    ]
    assert [v.split(": ", 1)[1] for v in inner_violations(edges)] == [
        "agents.sandbox.launch imports agents.verify.judge (agents.sandbox must not)",
        "agents.verify.judge imports agents.search.beam (agents.verify must not)",
        "agents.search.beam imports agents.cli.optimize (agents must not)",
    ]


def test_no_import_cycles_between_modules():
    cycles = import_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_reader_sees_deferred_relative_and_from_imports(tmp_path: Path):
    """The checks above can fail: each kind of import statement becomes an edge."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import agents.task\n"
        "from agents.verify.verdict import Verdict\n"
        "from . import sibling\n"
        "def later():\n"
        "    from server.jobs import Job\n"
        "    import bench.lsp_fuzz\n"
    )
    names = (
        "memory.probe",
        "memory.sibling",
        "agents.task",
        "agents.verify.verdict",
        "server.jobs",
    )
    edges = list(imports_of("memory.probe", probe, dict.fromkeys(names, probe)))
    assert [(edge.target, edge.line) for edge in edges] == [
        ("agents.task", 1),
        ("agents.verify.verdict", 2),
        ("memory.sibling", 3),
        ("server.jobs", 5),
        ("bench.lsp_fuzz", 6),
    ]
    assert [v.split(": ", 1)[1] for v in layer_violations(edges)] == [
        "memory.probe imports agents.task",
        "memory.probe imports agents.verify.verdict",
        "memory.probe imports server.jobs",
        "memory.probe imports bench.lsp_fuzz",
    ]
    cycle = [Import("agents.a", "agents.b", 1), Import("agents.b", "agents.a", 7)]
    assert import_cycles(cycle) == [
        "agents.a (line 1) -> agents.b (line 7) -> agents.a  [all tangled: agents.a, agents.b]"
    ]
