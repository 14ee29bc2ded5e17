"""The refusal before a problem runs: trace it on meta, compare with what the machine can
give, and stop with one line that says how much is needed and what to do."""

from __future__ import annotations

import math

from agents.sizing.footprint import GB, NEED_FACTOR, WORKER_FACTOR, Footprint, gb
from agents.sizing.machine import Capacity, capacity
from agents.task import LoadedProblem, SourceFile, TaskLoadError, size_kind


class TooLarge(TaskLoadError):
    """The problem cannot fit at these sizes; the message is the one-line refusal."""


TRACE_SHARE = 16
"""The forward is traced only when its inputs and weights alone, times the run's factor,
pass a sixteenth of the memory there is: below that, activations 16 times the inputs would
be needed to overflow, and the trace's first meta op costs about a second of CPU in every
fresh worker. A problem that still overflows fails as it always did, at the sandbox's cap."""


def refuse_if_too_big(
    problem: LoadedProblem,
    source: SourceFile,
    device: str,
    size: str,
    factors: tuple[int, int] = (NEED_FACTOR, WORKER_FACTOR),
) -> Footprint | None:
    """Raise TooLarge (one line) when the problem at its current sizes cannot fit; the
    footprint otherwise, or None when the trace or the machine could not be read (then it
    simply runs: a failed estimate never refuses). `factors`: forwards' worth of memory the
    whole run and its worker hold at once (an evaluation's by default; PROFILE_FACTOR's)."""
    from agents.sizing.trace import EstimateFailed, held_bytes, trace  # torch: in workers

    room = capacity(device)
    try:
        footprint = held_bytes(problem, source)
        if room is None or factors[0] * footprint.forward_bytes * TRACE_SHARE < room.memory_bytes:
            return footprint  # far below: the forward's trace would cost more than it tells
        footprint = trace(problem, source)
    except EstimateFailed:
        return None
    message = shortfall(footprint, room, factors)
    if message is not None:
        machine = math.ceil(factors[0] * footprint.forward_bytes * 1.25 / GB)
        raise TooLarge(f"{source.label}: {refusal(size, message, machine)}")
    return footprint


def shortfall(
    footprint: Footprint, room: Capacity, factors: tuple[int, int] = (NEED_FACTOR, WORKER_FACTOR)
) -> str | None:
    """`needs about X (...) but Y is Z`, or None when it fits."""
    whole, worker = (factor * footprint.forward_bytes for factor in factors)
    one = f"one forward's {gb(footprint.forward_bytes)}: {footprint.parts()}"
    if whole > room.memory_bytes:
        return (
            f"needs about {gb(whole)} ({factors[0]} x {one}) but {room.memory_what} is "
            f"{gb(room.memory_bytes)}"
        )
    if room.worker_bytes is not None and worker > room.worker_bytes:
        return (
            f"needs about {gb(worker)} in its worker ({factors[1]} x {one}) but the sandbox "
            f"leaves a worker {gb(room.worker_bytes)} of address space"
        )
    return None


def refusal(size: str, shortfall_text: str, machine_gb: int) -> str:
    """The whole line after the file's name: what it needs, what there is, what to do."""
    kind = size_kind(size)
    todo = f"a machine with {machine_gb} GB"
    if kind != "fit":
        todo = f"use --size fit, or {todo}"
    return f"at its {kind} sizes this problem {shortfall_text}; {todo}"
