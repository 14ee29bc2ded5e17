"""The refusal before a problem runs: trace it on meta, compare with what the machine can
give, and stop with one line that says how much is needed and what to do."""

from __future__ import annotations

import math

from agents.sizing.footprint import GB, NEED_FACTOR, WORKER_FACTOR, Footprint, gb
from agents.sizing.machine import Capacity, capacity
from agents.task import LoadedProblem, SourceFile, TaskLoadError, size_kind


def refuse_if_too_big(
    problem: LoadedProblem, source: SourceFile, device: str, size: str
) -> Footprint | None:
    """Raise TaskLoadError (one line) when the problem at its current sizes cannot fit; the
    footprint otherwise, or None when the trace or the machine could not be read (then it
    simply runs: a failed estimate never refuses)."""
    from agents.sizing.trace import EstimateFailed, trace  # torch: only where the problem is

    try:
        footprint = trace(problem, source)
    except EstimateFailed:
        return None
    room = capacity(device)
    if room is None:
        return footprint
    message = shortfall(footprint, room)
    if message is not None:
        raise TaskLoadError(f"{source.label}: {refusal(footprint, size, message)}")
    return footprint


def shortfall(footprint: Footprint, room: Capacity) -> str | None:
    """`needs about X ... but Y is Z`, or None when it fits."""
    if footprint.need_bytes > room.memory_bytes:
        return (
            f"needs about {gb(footprint.need_bytes)} ({NEED_FACTOR} x one forward's "
            f"{gb(footprint.forward_bytes)}: {footprint.parts()}) but {room.memory_what} is "
            f"{gb(room.memory_bytes)}"
        )
    if room.worker_bytes is not None and footprint.worker_bytes > room.worker_bytes:
        return (
            f"needs about {gb(footprint.worker_bytes)} in its worker ({WORKER_FACTOR} x one "
            f"forward's {gb(footprint.forward_bytes)}: {footprint.parts()}) but the sandbox "
            f"leaves a worker {gb(room.worker_bytes)} of address space"
        )
    return None


def refusal(footprint: Footprint, size: str, shortfall_text: str) -> str:
    """The whole line after the file's name: what it needs, what there is, what to do."""
    machine = math.ceil(footprint.need_bytes * 1.25 / GB)
    kind = size_kind(size)
    todo = (
        f"a machine with {machine} GB"
        if kind == "fit"
        else (f"use --size fit, or a machine with {machine} GB")
    )
    return f"at its {kind} sizes this problem {shortfall_text}; {todo}"
