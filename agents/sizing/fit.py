"""`--size fit`: scale a problem's batch-like constants down until it fits a memory and a
time budget, tracing each try on the meta device (nothing is allocated).

The rule: an evaluation's memory (footprint.NEED_FACTOR forwards) stays within half of what
the machine can give (room for its other work and parallel evaluations), the reference's
worker within its address-space cap, and one forward within FORWARD_SECONDS by a roofline
estimate: its FLOPs at FLOPS_PER_S plus its traffic (inputs, weights, every tensor it
creates) at BYTES_PER_S. Only leading dimensions that no other size depends on shrink
(constants.py); every batch-like constant is divided by the same power of two.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from agents.sizing.constants import input_only_constants
from agents.sizing.footprint import (
    BYTES_PER_S,
    FLOPS_PER_S,
    FORWARD_SECONDS,
    MEMORY_SHARE,
    Footprint,
    gb,
)
from agents.sizing.machine import Capacity
from agents.sizing.trace import meta_inputs, trace
from agents.task import LoadedProblem, SourceFile, TaskLoadError, call_factory


@dataclass(frozen=True)
class Fit:
    """The sizes chosen: {name: (shipped, used)}, the memory budget and the footprint."""

    sizes: dict[str, tuple[int, int]]
    budget_bytes: int
    footprint: Footprint
    scaled: bool = field(default=False)


def budget_bytes(room: Capacity) -> int:
    return int(room.memory_bytes * MEMORY_SHARE)


def forward_seconds(footprint: Footprint, device: str) -> float:
    """The roofline estimate of one forward (a floor: real code is slower)."""
    return footprint.flops / FLOPS_PER_S[device] + footprint.traffic_bytes / BYTES_PER_S[device]


def over_budget(footprint: Footprint, room: Capacity, device: str) -> float:
    """How many times too large the problem is for the budgets (<= 1: it fits)."""
    ratios = [
        footprint.need_bytes / max(budget_bytes(room), 1),
        forward_seconds(footprint, device) / FORWARD_SECONDS,
    ]
    if room.worker_bytes is not None:
        ratios.append(footprint.worker_bytes / max(room.worker_bytes, 1))
    return max(ratios)


def fit(problem: LoadedProblem, source: SourceFile, device: str, room: Capacity) -> Fit:
    """Scale `problem`'s module constants in place until it fits; TaskLoadError (one line)
    when no batch-like constant exists or even a batch of one is too large. The trace's own
    EstimateFailed passes through (the caller keeps the shipped sizes)."""
    footprint = trace(problem, source)
    ratio = over_budget(footprint, room, device)
    constants = batch_constants(problem, source) if ratio > 1 else {}
    shipped = dict(constants)
    if ratio <= 1:
        return Fit({}, budget_bytes(room), footprint)
    if not constants:
        raise TaskLoadError(
            f"{source.label}: --size fit: no batch-like constant to scale (a module-level int "
            f"that only get_inputs reads and that only sizes leading dimensions), and at its "
            f"sizes it needs {gb(footprint.need_bytes)} against a budget of "
            f"{gb(budget_bytes(room))}; lower its sizes by hand"
        )
    divisor = 1
    while ratio > 1:
        if all(max(1, value // divisor) == 1 for value in shipped.values()):
            raise TaskLoadError(
                f"{source.label}: --size fit: even at "
                + ", ".join(f"{name} 1" for name in shipped)
                + f" it needs {gb(footprint.need_bytes)} and about "
                f"{forward_seconds(footprint, device):.2g} s a forward against "
                f"{gb(budget_bytes(room))} and {FORWARD_SECONDS:g} s; use a larger machine"
            )
        divisor *= 2 ** max(1, int(ratio).bit_length() - 1)
        used = {name: max(1, value // divisor) for name, value in shipped.items()}
        vars(problem.module).update(used)
        footprint = trace(problem, source)
        ratio = over_budget(footprint, room, device)
    used = {name: int(vars(problem.module)[name]) for name in shipped}
    sizes = {name: (shipped[name], used[name]) for name in shipped}
    return Fit(sizes, budget_bytes(room), footprint, scaled=True)


def batch_constants(problem: LoadedProblem, source: SourceFile) -> dict[str, int]:
    """The constants (constants.py's candidates) that size only leading dimensions of
    get_inputs()'s tensors and leave get_init_inputs() alone: found by changing each one
    and seeing which sizes move, on meta."""
    module = vars(problem.module)
    base_shapes = _shapes(meta_inputs(problem, source))
    base_init = _init_signature(problem, source)
    found: dict[str, int] = {}
    for name in input_only_constants(source.text):
        value = module.get(name)
        if not isinstance(value, int) or value < 2:
            continue
        module[name] = value // 2
        try:
            moved = _moved_positions(base_shapes, _shapes(meta_inputs(problem, source)))
            init_same = _init_signature(problem, source) == base_init
        finally:
            module[name] = value
        if moved and moved <= {0} and init_same:
            found[name] = value
    return found


def _shapes(values: list[Any]) -> list[tuple[int, ...] | None]:
    return [tuple(v.shape) if isinstance(v, torch.Tensor) else None for v in values]


def _moved_positions(before: list, after: list) -> set[int] | None:
    """Dimension positions whose size changed; None when the inputs changed kind or rank."""
    if len(before) != len(after):
        return None
    moved: set[int] = set()
    for old, new in zip(before, after, strict=True):
        if (old is None) != (new is None) or (old is not None and len(old) != len(new)):
            return None
        if old is not None:
            moved |= {i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b}
    return moved


def _init_signature(problem: LoadedProblem, source: SourceFile) -> str:
    with torch.device("meta"):
        values = call_factory(problem.get_init_inputs, source, "get_init_inputs")
    return repr([tuple(v.shape) if isinstance(v, torch.Tensor) else v for v in values])
