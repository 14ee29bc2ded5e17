"""Run e-graph terms as torch code, and check a rule by what it puts in the e-graph.

`evaluate` writes a term with the product's own emitter (agents/offline/egraph/emit.py) into a
fresh fx graph whose placeholders are the leaves, and runs it: the same code path a rewrite
takes. `check_rule` builds an e-graph holding one left-hand side, runs the analyses and that
one rule, and compares every form the e-class now holds with the original, in float64.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
import torch.fx
import torch.nn as nn
from egglog import EGraph, i64, set_

from agents.offline.egraph import rules as library
from agents.offline.egraph.analysis import example_shapes, ranges, shapes
from agents.offline.egraph.emit import Emitter
from agents.offline.egraph.lower import ConvSpec, Lowered
from agents.offline.egraph.terms import T, crank, csize, groups, rank, size


def L(index: int) -> Any:
    return T.leaf(index)


@dataclass
class Inst:
    """One instance of a rule's left-hand side: the term, the leaves' values (float64), which
    leaves have sizes known by construction (parameters), conv settings by spec index, and
    norm-like modules replayed by spec index."""

    term: Any
    leaves: list[torch.Tensor]
    known: set[int] = field(default_factory=set)
    convs: list[ConvSpec] = field(default_factory=list)
    modules: list[nn.Module] = field(default_factory=list)


def _lowered(inst: Inst) -> tuple[Lowered, torch.fx.Graph, nn.Module]:
    root = nn.Module()
    graph = torch.fx.Graph()
    placeholders = [graph.placeholder(f"leaf{i}") for i in range(len(inst.leaves))]
    norms = []
    for index, module in enumerate(inst.modules):
        root.add_module(f"m{index}", module)
        norms.append(graph.call_module(f"m{index}", (placeholders[0],)))  # target only
    low = Lowered(SimpleNamespace(graph=graph))  # the emitter reads only the graph
    low.leaves = list(placeholders)
    low.inputs = list(placeholders)
    low.convs = list(inst.convs)
    low.norms = norms
    return low, graph, root


def evaluate(term: Any, inst: Inst) -> torch.Tensor:
    low, graph, root = _lowered(inst)
    value = Emitter(low).emit(term)
    graph.output(value)
    module = torch.fx.GraphModule(root, graph)  # owns the graph: dead code can be judged
    module.graph.eliminate_dead_code()
    module.recompile()
    with torch.no_grad():
        return module(*inst.leaves)


def facts(inst: Inst) -> list[Any]:
    out = []
    for index, value in enumerate(inst.leaves):
        term = T.leaf(index)
        out += [set_(rank(term)).to(i64(value.dim())), set_(crank(term)).to(i64(value.dim()))]
        for dim, extent in enumerate(value.shape):
            out.append(set_(csize(term, dim)).to(i64(extent)))
            if index in inst.known:
                out.append(set_(size(term, dim)).to(i64(extent)))
    for index, spec in enumerate(inst.convs):
        out.append(set_(groups(index)).to(i64(spec.groups)))
    return out


def forms(name: str, inst: Inst, rounds: int = 4, count: int = 12) -> list[Any]:
    """Every form (up to `count`) the lhs's e-class holds after `name` ran alone."""
    egraph = EGraph()
    egraph.register(*facts(inst), inst.term, T.none())
    rule = library.by_name()[name].ruleset()
    for _ in range(rounds):
        egraph.run((shapes | example_shapes | ranges).saturate())
        egraph.run(rule)
    egraph.run((shapes | example_shapes | ranges).saturate())
    return list(egraph.extract_multiple(inst.term, count))


def check_rule(name: str, inst: Inst, *, rtol: float = 1e-9, atol: float = 1e-9) -> list[Any]:
    """The rule fires on `inst` and every form it adds computes what the lhs computes."""
    expected = evaluate(inst.term, inst)
    found = forms(name, inst)
    original = str(inst.term)
    new = [form for form in found if str(form) != original]
    assert new, f"{name} did not fire on {original}"
    for form in new:
        got = evaluate(form, inst)
        assert got.shape == expected.shape, f"{name}: {form} has shape {tuple(got.shape)}"
        assert got.dtype == expected.dtype, f"{name}: {form} has dtype {got.dtype}"
        scale = float(expected.abs().max()) if expected.numel() else 0.0
        torch.testing.assert_close(
            got, expected, rtol=rtol, atol=atol * max(scale, 1.0), msg=f"{name}: {form}"
        )
    return new
