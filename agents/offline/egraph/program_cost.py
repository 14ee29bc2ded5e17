"""What a whole program of terms costs as `emit` writes it: each distinct subterm once, and a
proved constant's shape source on the meta device.

Extraction needs a tree cost (a term never cheaper than its parts, so it cannot pick a cycle),
which counts a shared subterm once per use and charges a constant for computing the tensor it
takes its shape from. Neither is what runs: `emit` writes a shared subterm once, and shapes a
constant on the meta device (no data touched) wherever its source has no op that must run for
real. Whether the cheaper form is offered, and the modelled saving the summary shows, come
from this count, so a GEMM proved unnecessary is modelled as gone, not as still paid for.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch.fx
from egglog import get_callable_args, get_callable_fn

from agents.offline.egraph.cost import LAUNCH_S, Shape, TermCost, _literal, infer_shape
from agents.offline.fx.effects import has_effects

if TYPE_CHECKING:
    from agents.offline.egraph.lower import Lowered

SHAPE_ONLY = {"T.full": 1, "T.extent": 0}
"""Constructors that read one argument's shape only: the argument's position."""


def program_cost(model: TermCost, terms: Iterable[Any], free: set[str], real: set[int]) -> float:
    """Seconds for `terms` computed together. `free`: terms computed anyway (pinned);
    `real`: leaves that cannot be read on the meta device (values computed in forward)."""
    charged: set[tuple[str, bool]] = set()
    meta_ok: dict[str, bool] = {}
    total = 0.0

    def runs_on_meta(term: Any) -> bool:
        key = str(term)
        if key not in meta_ok:
            fn = str(get_callable_fn(term))
            args = get_callable_args(term) or ()
            if fn == "T.opaque" or (fn == "T.leaf" and int(_literal(args[0])) in real):
                meta_ok[key] = False
            else:
                meta_ok[key] = all(runs_on_meta(a) for a in args if _is_term(a))
        return meta_ok[key]

    def visit(term: Any, meta: bool) -> Shape | None:
        nonlocal total
        fn = str(get_callable_fn(term))
        args = get_callable_args(term) or ()
        literals = [_literal(arg) for arg in args]
        shapes: list[Shape | None] = []
        for index, arg in enumerate(args):
            if not _is_term(arg):
                shapes.append(None)
            elif SHAPE_ONLY.get(fn) == index:
                shapes.append(visit(arg, meta or runs_on_meta(arg)))
            else:
                shapes.append(visit(arg, meta))
        shape = infer_shape(fn, literals, shapes, model.leaf_shapes)
        key = (str(term), meta)
        if key not in charged:
            charged.add(key)
            if str(term) not in free:
                own = model.own(fn, literals, shapes, shape)
                total += min(own, LAUNCH_S) if meta else own
        return shape

    for term in terms:
        if term is not None and _is_term(term):
            visit(term, False)
    return total


def written_cost(
    model: TermCost, low: Lowered, outputs: Sequence[Any], anchored: Sequence[Sequence[Any]]
) -> float:
    """The cheaper form as `emit` writes it: its outputs, and each op kept where it is
    (an anchor) that still runs, because it has effects or the new code reads its value; a
    dead one is pruned, and so is what only it read."""
    terms = [term for term in outputs if term is not None]
    charged = [False] * len(low.anchors)
    changed = True
    while changed:
        changed = False
        read = _upstream(low.leaves[index] for index in _leaves_read(terms))
        for index, anchor in enumerate(low.anchors):
            if charged[index] or not (has_effects(low.gm, anchor.node) or anchor.node in read):
                continue
            charged[index] = changed = True
            terms += [term for term in anchored[index] if term is not None]
    return program_cost(model, terms, low.pinned, computed_leaves(low))


def original_cost(model: TermCost, low: Lowered) -> float:
    """The program as the user wrote it: every output and every kept op runs."""
    terms = [*low.outputs, *(term for anchor in low.anchors for term in anchor.terms)]
    return program_cost(model, terms, low.pinned, computed_leaves(low))


def computed_leaves(low: Lowered) -> set[int]:
    """Leaves whose value forward computes (not an input or a parameter)."""
    return {
        index
        for index, leaf in enumerate(low.leaves)
        if isinstance(leaf, torch.fx.Node) and leaf.op not in ("placeholder", "get_attr")
    }


def _leaves_read(terms: Iterable[Any]) -> set[int]:
    found: set[int] = set()
    stack = [term for term in terms if _is_term(term)]
    seen: set[str] = set()
    while stack:
        term = stack.pop()
        if str(term) in seen:
            continue
        seen.add(str(term))
        args = get_callable_args(term) or ()
        if str(get_callable_fn(term)) in ("T.leaf", "T.opaque"):
            found.add(int(_literal(args[0])))
        stack.extend(arg for arg in args if _is_term(arg))
    return found


def _upstream(leaves: Iterable[Any]) -> set[torch.fx.Node]:
    """The fx nodes these leaves are, and every node they were computed from."""
    stack = [leaf for leaf in leaves if isinstance(leaf, torch.fx.Node)]
    seen: set[torch.fx.Node] = set()
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(node.all_input_nodes)
    return seen


def _is_term(value: Any) -> bool:
    try:
        return str(get_callable_fn(value)).startswith("T.")
    except (TypeError, AttributeError):
        return False
