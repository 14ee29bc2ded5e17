"""When a measured speedup can be trusted as a number, and when it is only "unstable".

Why: on a busy machine honest copies of the reference (A/A) measured anywhere from 0.15x to
2.9x (red team, 2 cores, load 2-11), each reported as a number; beside six busy loops one was
reported at 2.22x. A worker given a quarter of a CPU takes 4-20 times longer over a request
when the scheduler preempts it; the load shifts within a run, so the two sides' medians can
fall on different regimes, and a bootstrap interval, which assumes the noise is the same from
the first round to the last, cannot see it. So the rule asks what such an interval cannot:

- do the two halves of the run agree? Each half's median of the per-round ratios (the
  reference's and the candidate's request of the same ABBA round, milliseconds apart, so a
  slow drift of the load cancels); halves a factor `HALVES_FACTOR` apart, or on two sides of
  1 where the run claims a speedup, mean the load, not the code, set the ratio;
- does the interval support the claim? A ratio beyond the `BAND` (1.2x either way) must have
  its 95% interval clear of 1; an interval wider than `WIDTH_FACTOR` (high over low) says
  nothing about the size of the effect;
- was the machine contended? The kernel's CPU pressure (/proc/pressure/cpu, "some": the
  share of time a runnable task waited for a CPU) over the measurement; above
  `CONTENDED_SHARE`, the interval must clear the band itself, not just 1.

- did the scheduler, not the code, set the ratio? Each timed request's wait for a CPU (the
  worker's cgroup's CPU pressure, or its threads' run delay, and the parent's own wait to
  read the reply) is read from outside; a claim that taking the waits out leaves within the
  band, or shrinks by more than the square root of what is left, was made by the waits (a
  claim the waits shrank is understated, and stands: with K calls a request on both sides,
  the faster side's short requests carry a time slice's wait in a larger share). CI saw an
  A/A copy at 2.57x, its halves agreeing and its interval clear of the band, beside two busy
  loops: one side's requests waited for a CPU, the other's did not.

A ratio within the band (an A/A copy's) is reported as a number when its halves agree: it
claims no speedup. Large real speedups survive: their halves agree in direction and within a
factor of two, and their intervals stand far from 1.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

BAND = 1.2
"""A ratio within 1/BAND..BAND claims neither a speedup nor a slowdown."""
HALVES_FACTOR = 2.0
WIDTH_FACTOR = 8.0
CONTENDED_SHARE = 0.5
MIN_HALF = 3  # rounds in each half before halves are compared
PRESSURE_PATH = Path("/proc/pressure/cpu")


@dataclass(frozen=True)
class Stability:
    stable: bool
    reason: str = ""  # one line; empty when stable


@dataclass(frozen=True)
class Waits:
    """How long each side's timed requests waited for a CPU, and the ratio without it."""

    speedup: float  # the ratio of the medians, each request's wait taken out
    reference_share: float  # of the reference's timed wall time, the share spent waiting
    candidate_share: float


@dataclass(frozen=True)
class PressureReading:
    """The kernel's cumulative CPU stall ("some", microseconds) at a moment."""

    stall_us: int
    at_s: float


def read_pressure(now_s: float) -> PressureReading | None:
    """None where the kernel keeps no pressure account (not Linux, or PSI off)."""
    try:
        first = PRESSURE_PATH.read_text().splitlines()[0]
        return PressureReading(int(first.split("total=")[1].split()[0]), now_s)
    except (OSError, IndexError, ValueError):
        return None


def own_run_delay_s() -> float | None:
    """Seconds this thread has spent runnable but waiting for a CPU (its schedstat): the
    parent's own wait to read a reply is inside the request it times."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as handle:
            return int(handle.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def stall_share(start: PressureReading | None, end: PressureReading | None) -> float | None:
    """The share of the span between two readings during which some task waited for a CPU."""
    if start is None or end is None or end.at_s <= start.at_s:
        return None
    share = (end.stall_us - start.stall_us) / 1e6 / (end.at_s - start.at_s)
    return min(max(share, 0.0), 1.0)


def paired_ratios(reference: list[float], candidate: list[float]) -> list[float]:
    """Per round: the reference's time over the candidate's, from the same ABBA round."""
    return [r / c for r, c in zip(reference, candidate, strict=False) if r > 0 and c > 0]


def halves(ratios: list[float]) -> tuple[float, float] | None:
    """The median ratio of the first and of the second half of the rounds, in run order."""
    if len(ratios) < 2 * MIN_HALF:
        return None
    middle = len(ratios) // 2
    return statistics.median(ratios[:middle]), statistics.median(ratios[middle:])


def assess(
    reference: list[float],
    candidate: list[float],
    speedup: float,
    interval: tuple[float, float],
    contention: float | None = None,
    waits: Waits | None = None,
) -> Stability:
    """Whether `speedup` (with its 95% `interval`) from these per-round times (run order,
    paired by round) can be reported as a number; see the module docstring for the rule."""
    if not (speedup > 0 and math.isfinite(speedup)):
        return Stability(False, f"the ratio of the medians came out as {speedup}")
    if waits is not None and _set_by_waits(speedup, waits):
        return Stability(
            False,
            f"{_busy(contention)}the reference's timed requests waited for a CPU "
            f"{waits.reference_share:.0%} of their time and the candidate's "
            f"{waits.candidate_share:.0%}: without those waits the ratio is "
            f"{waits.speedup:.2f}x, not {speedup:.2f}x",
        )
    split = halves(paired_ratios(reference, candidate))
    if split is not None:
        first, second = split
        claim = 1 if speedup > BAND else -1 if speedup < 1 / BAND else 0
        if _halves_disagree(first, second, claim):
            return Stability(
                False,
                f"{_busy(contention)}the two halves of the run measured {first:.2f}x "
                f"and {second:.2f}x",
            )
    low, high = interval
    if not (low > 0 and math.isfinite(high)):
        return Stability(False, f"the 95% interval {low:.2f}-{high:.2f}x is not a range")
    if high / low > WIDTH_FACTOR:
        return Stability(
            False, f"{_busy(contention)}the 95% interval {low:.2f}-{high:.2f}x is too wide"
        )
    contended = contention is not None and contention >= CONTENDED_SHARE
    clear = BAND if contended else 1.0
    faster, slower = speedup > BAND, speedup < 1 / BAND
    if (faster and low <= clear) or (slower and high >= 1 / clear):
        target = clear if faster else 1 / clear
        return Stability(
            False,
            f"{_busy(contention)}measured {speedup:.2f}x but its 95% interval "
            f"{low:.2f}-{high:.2f}x does not clear {target:.2f}x",
        )
    return Stability(True)


def _set_by_waits(speedup: float, waits: Waits) -> bool:
    """A claim (beyond the band either way) that the waits inflated: taking each request's
    wait out leaves no claim, or shrinks it by more than the square root of what is left
    (in logs, the waits made more than a third of the claim). Waits that shrank a claim
    (the faster side waited more) never unsettle it: it is understated, not overstated. A
    ratio within the band claims nothing."""
    if 1 / BAND <= speedup <= BAND:
        return False
    left = waits.speedup if speedup > 1 else 1 / waits.speedup if waits.speedup > 0 else 0.0
    claim = speedup if speedup > 1 else 1 / speedup
    if not (left > 0 and math.isfinite(left)):
        return True
    if left >= claim:
        return False
    return left <= BAND or math.log(claim / left) > 0.5 * math.log(left)


def _halves_disagree(first: float, second: float, claim: int) -> bool:
    """Halves a factor `HALVES_FACTOR` apart disagree; so do halves on two sides of 1 where
    the whole run claims a speedup (`claim` 1) or a slowdown (-1); with no claim (0), one
    half beyond the band while the other is on the other side of 1."""
    low, high = sorted((first, second))
    if high / low > HALVES_FACTOR:
        return True
    if claim > 0:
        return low <= 1.0
    if claim < 0:
        return high >= 1.0
    return (high > BAND and low <= 1.0) or (low < 1 / BAND and high >= 1.0)


def _busy(contention: float | None) -> str:
    if contention is None or contention < CONTENDED_SHARE:
        return ""
    return f"the machine was busy (a task waited for a CPU {contention:.0%} of the time): "
