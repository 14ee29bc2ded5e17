"""Replace hand-written formulas with the fused library ops that compute the same thing:
softmax, log-softmax and logsumexp, layer and RMS norm, GELU and swish, attention, matmul +
bias. One fused kernel reads the activation once where the hand-written chain reads and
writes it once per op, and the library versions are at least as accurate.

The rewrite runs on the fx graph (rules in library_rules, library_activations and
library_matmul, graph reading in library_match); a forward that fx cannot trace gets the
source-level fallback (library_source), which handles attention and softmax.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

import torch
import torch.fx

from agents.offline.fx import codegen, effects, graph_edit, tracing
from agents.offline.passes import library_source
from agents.offline.passes.base import Program, Rewrite
from agents.offline.passes.library_match import Graph, Node, users_inside
from agents.offline.passes.library_rules import RULES, Match

_MAX_ROUNDS = 4
NOTHING = (
    "no hand-written softmax, log-softmax, logsumexp, layer/RMS norm, GELU, swish, mish, "
    "hardswish, attention or matmul + bias whose intermediates are used only inside it"
)


class LibrarySubstitution:
    """Hand-written softmax/norm/GELU/attention/linear → the fused torch op."""

    name = "library-substitution"

    def apply(self, program: Program) -> Rewrite:
        try:
            gm = tracing.trace(program)
        except tracing.TraceError as error:
            return library_source.rewrite(program, f"{error}")
        if effects.mutates_anything(gm):
            return Rewrite(None, "forward mutates tensors in place; left alone", method="fx")
        try:
            changes, notes = _substitute(gm, program)
            if not changes:
                return Rewrite(None, "; ".join([NOTHING, *notes[:2]]), method="fx")
            effects.prune(gm)
            gm.graph.lint()
            tracing.propagate(gm, program.inputs)  # the rewritten graph must still run
            doc = f"{self.name}: " + "; ".join(changes)
            source = codegen.emit(program, gm, doc=doc.replace('"""', "'''")[:300])
        except tracing.TraceError as error:  # e.g. a constant fx cannot write back as code
            return library_source.rewrite(program, f"{error}")
        except Exception as error:  # a bug here must cost a rewrite, never the caller's run
            summary = f"{self.name} failed: {type(error).__name__}: {error}"
            return Rewrite(None, summary, method="fx")
        return Rewrite(source, "; ".join(changes), changes, method="fx")


@dataclass
class _Site:
    """One rewritten place: the source lines it covered and what it became."""

    lines: set[int] = field(default_factory=set)
    what: str = ""
    target: str = ""
    name: str = ""

    def describe(self) -> str:
        where = self.name
        if self.lines:
            first, last = min(self.lines), max(self.lines)
            where = f"line {first}" if first == last else f"line {first}-{last}"
        return f"{where}: hand-written {self.what} → {self.target}"


def _substitute(gm: torch.fx.GraphModule, program: Program) -> tuple[list[str], list[str]]:
    """Apply the rules in order, each over the whole graph, in rounds until nothing changes;
    one change line per final site, and the near misses."""
    graph = Graph(gm)
    rewriter = _Rewriter(graph, program)
    for _ in range(_MAX_ROUNDS):
        changed = False
        for rule in RULES:
            for node in list(gm.graph.nodes):
                if node not in rewriter.alive or node.op not in _CALLS:
                    continue
                match = rule(graph, node)
                if match is not None and _removable(graph, match):
                    rewriter.apply(match)
                    changed = True
        if not changed:
            break
    sites = sorted(rewriter.sites.values(), key=lambda s: (min(s.lines, default=0), s.name))
    return [site.describe() for site in sites], list(dict.fromkeys(graph.notes))


_CALLS = ("call_function", "call_method", "call_module")


class _Rewriter:
    """Applies matches and keeps track of the sites they belong to."""

    def __init__(self, graph: Graph, program: Program):
        self.graph = graph
        self.program = program
        self.sites: dict[Node, _Site] = {}
        self.alive: set[Node] = set(graph.gm.graph.nodes)
        self.lines: dict[Node, int] | None = None  # traced again only once something matches

    def apply(self, match: Match) -> None:
        gm = self.graph.gm
        if self.lines is None:
            self.lines = _source_lines(self.program, gm)
        with gm.graph.inserting_before(match.root):
            new = match.build(graph_edit.Builder(gm.graph))
        new.meta["tensor_meta"] = match.root.meta.get("tensor_meta")  # same shape and dtype
        graph_edit.replace_uses(match.root, new)
        previous = self.sites.get(match.root)
        merged = [self.sites.pop(node) for node in match.inner if node in self.sites]
        site = _Site(what=match.what, target=match.target, name=match.root.name)
        if match.refines and previous is not None:
            site.what, site.target = previous.what, previous.target
        for old in merged:
            site.lines |= old.lines
        site.lines |= {self.lines[node] for node in match.inner if node in self.lines}
        self.sites[new] = site
        effects.prune(gm)
        self.alive = set(gm.graph.nodes)


def _removable(graph: Graph, match: Match) -> bool:
    """Every removed intermediate is used only inside the pattern and has no effects."""
    return users_inside(match.inner, match.root) and not any(
        effects.has_effects(graph.gm, node) for node in match.inner
    )


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in ')


def _source_lines(program: Program, gm: torch.fx.GraphModule) -> dict[Node, int]:
    """Each node's line in the program's source, from a second trace that records stack
    traces (tracing.trace does not); names match since both traces see the same module."""
    forward = getattr(type(program.module), "forward", None)
    filename = getattr(getattr(forward, "__code__", None), "co_filename", None)
    if filename is None:
        return {}
    tracer = torch.fx.Tracer()
    tracer.record_stack_traces = True
    try:
        module = copy.deepcopy(program.module)
        module.train()
        graph = tracer.trace(module)
    except Exception:  # line numbers are a courtesy; the node names stand in for them
        return {}
    by_name: dict[str, int] = {}
    for node in graph.nodes:
        frames = [m for m in _FRAME.finditer(node.stack_trace or "") if m["file"] == filename]
        if frames:
            by_name[node.name] = int(frames[-1]["line"])
    return {node: by_name[node.name] for node in gm.graph.nodes if node.name in by_name}
