"""Equality saturation over a traced forward: every equivalent form at once, the cheapest out.

The forward is traced (fx), lowered into terms (lower.py), and the rule library (rules.py)
runs with the analyses (analysis.py) until nothing new appears or a budget runs out. The
cheapest form under the roofline cost model (cost.py) is extracted and written back as plain
torch code (emit.py) through the same code generator as every fx pass, so parameter names,
checkpoints and scalars read from `self` are kept. The result is offered only when the model
finds it cheaper; the sandbox then times it and the reviewer judges it like any candidate.
"""

from __future__ import annotations

import functools
import inspect
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from egglog import EGraph, var

from agents.offline.egraph import lower_ops
from agents.offline.egraph import rules as library
from agents.offline.egraph.analysis import example_shapes, ranges, shapes
from agents.offline.egraph.cost import Roofline, TermCost
from agents.offline.egraph.emit import EmitError, Emitter
from agents.offline.egraph.lower import Anchor, Lowered, lower, register
from agents.offline.egraph.program_cost import original_cost, written_cost
from agents.offline.egraph.terms import T
from agents.offline.fx import codegen, effects, ops, tracing
from agents.offline.passes.base import Program, Rewrite

MAX_ROUNDS = 12
TIME_BUDGET_S = 2.0
"""CPU seconds of the saturating thread itself (`time.thread_time`): neither other processes'
load nor torch's worker threads spinning after the trace count, so a loaded machine proves
what a quiet one does."""
NODE_LIMIT = 20_000


@dataclass
class Saturated:
    """What one saturation found: the best term per output, both costs (of the programs as
    written, program_cost.py), the rules that fired."""

    best: list[Any]
    cost: float
    original_cost: float
    anchored: list[list[Any]] = field(default_factory=list)  # per Lowered.anchors
    fired: list[str] = field(default_factory=list)
    rounds: int = 0
    seconds: float = 0.0
    nodes: int = 0


def saturate(low: Lowered, device: str) -> Saturated:
    """Run the rules over `low` within the budgets and extract the cheapest form."""
    egraph = EGraph()
    register(egraph, low)
    roots = [term for term in low.outputs if term is not None]
    roots += [term for anchor in low.anchors for term in anchor.terms]
    egraph.register(*roots, T.none())  # T.none() so that "b != T.none()" can be decided
    started = time.thread_time()
    fired: dict[str, int] = {}
    names = rule_names()
    rounds = 0
    for rounds in range(1, MAX_ROUNDS + 1):  # noqa: B007  (rounds is reported)
        egraph.run((shapes | example_shapes | ranges).saturate())
        report = egraph.run(library.all_rules())
        for decl, matches in report.num_matches_per_rule.items():
            if matches and decl in names:
                fired[names[decl]] = fired.get(names[decl], 0) + matches
        nodes = sum(count for _, count in egraph.all_function_sizes())
        if not report.updated or time.thread_time() - started > TIME_BUDGET_S:
            break
        if nodes > NODE_LIMIT:
            break
    egraph.run((shapes | example_shapes | ranges).saturate())
    opaque = {i for i, leaf in enumerate(low.leaves) if _is_computed(leaf)} - low.free
    leaf_shapes = [_shape(low, leaf) for leaf in low.leaves]
    model = TermCost(Roofline.for_device(device), leaf_shapes, opaque)

    def cheapest(term: Any) -> Any:
        return None if term is None else egraph.extract(term, cost_model=model)

    best = [cheapest(term) for term in low.outputs]
    anchored = [[cheapest(term) for term in anchor.terms] for anchor in low.anchors]
    cost, original = written_cost(model, low, best, anchored), original_cost(model, low)
    nodes = sum(count for _, count in egraph.all_function_sizes())
    seconds = time.thread_time() - started
    return Saturated(best, cost, original, anchored, sorted(fired), rounds, seconds, nodes)


def _is_computed(leaf: Any) -> bool:
    return isinstance(leaf, torch.fx.Node) and leaf.op not in ("placeholder", "get_attr")


RANDOM_MODULES = (
    torch.nn.Dropout,
    torch.nn.Dropout1d,
    torch.nn.Dropout2d,
    torch.nn.Dropout3d,
    torch.nn.AlphaDropout,
    torch.nn.FeatureAlphaDropout,
)
RANDOM_FUNCTIONS = {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout"}
RANDOM_FUNCTIONS |= {"rand", "randn", "rand_like", "randn_like", "randint", "bernoulli"}
RANDOM_FUNCTIONS |= {"multinomial", "normal", "randperm", "randint_like"}


def _random_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The nodes that draw random numbers, in the order they run."""
    return [node for node in gm.graph.nodes if _draws(gm, node)]


def _draws(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """A dropout with p=0 or training=False returns at once, drawing nothing."""
    if lower_ops.inactive_dropout(gm, node) is not None:
        return False
    if isinstance(ops.call_module(gm, node), RANDOM_MODULES):
        return True
    return node.op in ("call_function", "call_method") and ops.op_name(node) in RANDOM_FUNCTIONS


def _random_draws(gm: torch.fx.GraphModule) -> list[str]:
    return [str(node.target) for node in _random_nodes(gm)]


def _shape(low: Lowered, leaf: Any) -> tuple[int, ...] | None:
    if isinstance(leaf, str):
        return tuple(low.gm.get_parameter(leaf).shape) if _has_param(low.gm, leaf) else None
    return ops.tensor_shape(leaf)


def _has_param(gm: torch.fx.GraphModule, target: str) -> bool:
    try:
        gm.get_parameter(target)
    except AttributeError:
        return False
    return True


@functools.cache
def rule_names() -> dict[Any, str]:
    """The declaration egglog reports each rule under, to the catalogue name it belongs to."""
    names: dict[Any, str] = {}
    for spec in library.CATALOGUE:
        hints = inspect.get_annotations(spec.body, eval_str=True)
        params = inspect.signature(spec.body).parameters
        variables = [var(name, hints[name]) for name in params]
        for item in spec.body(*variables):
            names[item.decl] = spec.name
    return names


class EqualitySaturation:
    """The algebra of the whole forward at once: reductions through linear maps and
    convolutions, size-1 dims, constants proved by value ranges, identities, folding."""

    name = "equality-saturation"

    def apply(self, program: Program) -> Rewrite:
        gm = tracing.trace(program)
        if effects.mutates_anything(gm):
            return Rewrite(None, "forward mutates tensors in place; left alone", method="egraph")
        low = lower(gm)
        if not any(term is not None for term in low.outputs):
            return Rewrite(None, "forward returns no tensor or flat tuple of them", method="egraph")
        if low.unsupported:
            return Rewrite(None, low.unsupported, method="egraph")
        try:
            found = saturate(low, program.device)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as error:  # egglog's panics too: a rewrite lost, never the run
            reason = f"saturation failed: {type(error).__name__}: {str(error)[:200]}"
            return Rewrite(None, reason, method="egraph")
        if not found.fired or found.cost >= found.original_cost * (1 - 1e-6):
            return Rewrite(None, "no cheaper equivalent form", method="egraph")
        try:
            source = self._write(program, gm, low, found)
        except (EmitError, tracing.TraceError) as error:
            return Rewrite(None, f"cannot write the cheaper form: {error}", method="egraph")
        except Exception as error:  # a bug here must cost a rewrite, never the caller's run
            reason = f"writing the cheaper form failed: {type(error).__name__}: {error}"
            return Rewrite(None, reason[:300], method="egraph")
        laws = [library.by_name()[name].law for name in found.fired]
        summary = (
            f"equality saturation: modelled cost {found.original_cost * 1e6:.1f} -> "
            f"{found.cost * 1e6:.1f} us; rules: {', '.join(found.fired)}"
        )
        return Rewrite(source, summary, laws, method="egraph")

    @staticmethod
    def _write(program: Program, gm: torch.fx.GraphModule, low: Lowered, found: Saturated) -> str:
        output = next(node for node in gm.graph.nodes if node.op == "output")
        single = isinstance(output.args[0], torch.fx.Node)
        before = [output.args[0]] if single else list(output.args[0])
        expected = [ops.tensor_meta(value) for value in before]
        draws = _random_draws(gm)
        emitter = Emitter(low)
        for anchor, forms in zip(low.anchors, found.anchored, strict=True):
            _rewrite_arguments(gm, emitter, anchor, forms)
        after: list[Any] = []
        with gm.graph.inserting_before(output):
            for old, form in zip(before, found.best, strict=True):
                after.append(old if form is None else _fresh(gm, emitter.emit(form), old, after))
        output.args = (after[0],) if single else (type(output.args[0])(after),)
        effects.prune(gm)
        _drop_dead_writes(gm)
        _drop_dead_draws(gm, draws)
        gm.graph.lint()
        tracing.propagate(gm, program.inputs)
        if _contiguous_again(gm, output, expected):
            tracing.propagate(gm, program.inputs)
        for old, new in zip(expected, output.args[0] if not single else output.args, strict=True):
            got = ops.tensor_meta(new)
            if (old is None) != (got is None) or (
                old is not None and (got.shape, got.dtype) != (old.shape, old.dtype)
            ):
                raise EmitError("the rewritten forward's output differs in shape or dtype")
        doc = "equality saturation: " + "; ".join(found.fired)
        return codegen.emit(program, gm, doc=doc[:300])


def _rewrite_arguments(
    gm: torch.fx.GraphModule, emitter: Emitter, anchor: Anchor, forms: list[Any]
) -> None:
    """An op kept where it is reads its arguments' cheapest forms, written just before it
    from what is computed there; where one cannot be, it keeps its arguments."""
    try:
        with gm.graph.inserting_before(anchor.node):
            emitter.before = anchor.node
            new = [emitter.emit(form) for form in forms]
    except EmitError:
        return  # what was written is dead, and pruned
    finally:
        emitter.before = None
    if not all(isinstance(value, torch.fx.Node) for value in new):
        return
    for old, value in zip(anchor.arguments, new, strict=True):
        if value is not old:
            anchor.node.replace_input_with(old, value)


def _drop_dead_writes(gm: torch.fx.GraphModule) -> None:
    """An in-place write nobody reads (nor the tensor it writes, nor the earlier in-place ops
    that are that tensor) changes nothing observable: it goes, and what only it read."""
    changed = True
    while changed:
        changed = False
        for node in reversed(list(gm.graph.nodes)):
            if node.users or not effects.is_mutating(gm, node):
                continue
            same, target = {node}, node.args[0] if node.args else None
            while isinstance(target, torch.fx.Node) and target.op.startswith("call_"):
                same.add(target)
                target = target.args[0] if effects.is_mutating(gm, target) and target.args else None
            if target is not None or any(set(n.users) - same for n in same):
                continue  # the tensor is an input, or something else reads it
            gm.graph.erase_node(node)
            effects.prune(gm)
            changed = True
            break


def _drop_dead_draws(gm: torch.fx.GraphModule, draws: list[str]) -> None:
    """A random op nobody reads only drew random numbers. Each draw shifts every later one
    (the verifier seeds both sides alike), so dead ones go all at once where the live ones
    then draw as the original did (a rewritten dropout replacing the one it was), else only
    from the end; the draws left must be the original's, or a prefix of them."""
    nodes = _random_nodes(gm)
    if [str(node.target) for node in nodes if node.users] == draws:
        for node in reversed(nodes):
            if not node.users:
                gm.graph.erase_node(node)
        effects.prune(gm)
    while (last := (_random_nodes(gm) or [None])[-1]) is not None and not last.users:
        gm.graph.erase_node(last)
        effects.prune(gm)
    left = _random_draws(gm)
    if left != draws[: len(left)]:
        raise EmitError("the cheaper form would draw random numbers in another order")


def _fresh(gm: torch.fx.GraphModule, value: Any, old: Any, taken: list[Any]) -> torch.fx.Node:
    """An output that is never the caller's input or a parameter (nor a view of one) unless
    the original returned that very node, and never the same tensor as another output."""
    if not isinstance(value, torch.fx.Node):
        raise EmitError("the cheaper form is not a tensor")
    base = effects.alias_base(value)
    shared = isinstance(base, torch.fx.Node) and base.op in ("placeholder", "get_attr")
    if (shared and value is not old) or value in taken:
        return gm.graph.call_method("clone", (value,))
    return value


def _contiguous_again(gm: torch.fx.GraphModule, output: torch.fx.Node, expected: list[Any]) -> bool:
    """An output the original returned contiguous stays contiguous (a removed .contiguous()
    changes a layout, never a value)."""
    single = isinstance(output.args[0], torch.fx.Node)
    values = [output.args[0]] if single else list(output.args[0])
    changed = False
    for index, (value, old) in enumerate(zip(values, expected, strict=True)):
        meta = ops.tensor_meta(value)
        contiguous = torch.contiguous_format
        if old is None or meta is None or old.memory_format != contiguous:
            continue
        if meta.memory_format == contiguous:
            continue
        with gm.graph.inserting_before(output):
            values[index] = gm.graph.call_method("contiguous", (value,))
        changed = True
    if changed:
        output.args = (values[0],) if single else (type(output.args[0])(values),)
    return changed
