"""Work hidden where no clock looks: the rule on drawing inputs (the `prepare` requests).

Why: before each timed request both sides draw the same K input sets with the same harness
code, untimed. A candidate that computes its answers while its inputs are drawn (a wrapped
`get_inputs`, tests/adversarial/precompute_in_prepare.py) then makes a timed call of
nothing; the work shows as extra cost of its drawing. That cost is measured as the CPU time
its worker's whole process tree used during those requests (agents/sandbox/peer.py reads it
from the worker's cgroup, or from /proc), not as wall time: on a loaded machine wall time
grows with whatever else runs (an honest copy of the reference was refused at 0.092 ms over
0.038 ms allowed, four evaluations on two cores), while CPU time counts only the worker's
own work, in any process or thread of it, exited ones included. CPU time has its own
noise: an OpenMP pool that spun after the previous request spins on into this one (both
sides alike for the same code, not for different code), which wall time does not show when
the pool has cores of its own. So on the CPU a candidate is refused when it spent more in
both: hidden work costs both (spread over T threads, 1/T of it in wall time, still far
over), while load inflates only the wall time and a pool's spin only the CPU time. On CUDA,
work queued on the device does not show in CPU time, so there the wall-clock rule alone
holds, as it does wherever CPU time cannot be read.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_PAIRS = 3


@dataclass(frozen=True)
class DrawingCost:
    """One side's cost of drawing inputs, per call, over the timed rounds (seconds):
    `wall` always, `cpu` where the worker's CPU time could be read (else None per round)."""

    wall: tuple[float, ...]
    cpu: tuple[float | None, ...]


@dataclass(frozen=True)
class HiddenWorkRule:
    """A candidate may take longer than the reference to draw inputs by `share` of its own
    call time or `relative` of the reference's drawing (whichever is larger), plus three
    standard errors of the paired differences and `floor_s`."""

    share: float = 0.25
    relative: float = 0.5
    floor_s: float = 10e-6


def excess(
    reference: DrawingCost,
    candidate: DrawingCost,
    candidate_call_s: float,
    device: str,
    rule: HiddenWorkRule,
) -> str | None:
    """Why the candidate is refused for work done while its inputs were drawn, or None.
    On the CPU, where both sides' CPU time was read: excess CPU time and excess wall time
    both; else wall time alone."""
    ref_cpu, cand_cpu = reference.cpu, candidate.cpu
    by_cpu = (
        device != "cuda"
        and all(value is not None for value in (*ref_cpu, *cand_cpu))
        and len(ref_cpu) == len(reference.wall)
    )
    by_wall = paired_excess(reference.wall, candidate.wall, candidate_call_s, rule, "time")
    if not by_cpu or by_wall is None:
        return by_wall
    ref_side = [float(value) for value in ref_cpu if value is not None]
    cand_side = [float(value) for value in cand_cpu if value is not None]
    return paired_excess(ref_side, cand_side, candidate_call_s, rule, "CPU time")


def paired_excess(
    reference: Sequence[float],
    candidate: Sequence[float],
    candidate_call_s: float,
    rule: HiddenWorkRule,
    what: str,
) -> str | None:
    """The test on the paired differences: their median must stay within the allowance
    plus three standard errors (from their median absolute deviation)."""
    pairs = [c - r for c, r in zip(candidate, reference, strict=True)]
    if len(pairs) < MIN_PAIRS:
        return None
    hidden = statistics.median(pairs)
    spread = statistics.median(abs(p - hidden) for p in pairs) * 1.4826
    standard_error = 1.2533 * spread / math.sqrt(len(pairs))
    allowed = (
        max(rule.share * candidate_call_s, rule.relative * statistics.median(reference))
        + 3 * standard_error
        + rule.floor_s
    )
    if hidden <= allowed:
        return None
    return (
        f"the candidate worked before its timed calls: drawing inputs took it {hidden * 1e3:.3f} "
        f"ms more {what} than the reference's same work, over {len(pairs)} runs (allowed "
        f"{allowed * 1e3:.3f} ms)"
    )
