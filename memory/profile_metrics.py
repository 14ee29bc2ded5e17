"""What the skill gate reads of a kernel's profile, as memory's own values.

Why: memory sits below agents and imports nothing from it, yet the gate decides on a profile
that agents/profile measures. Agents hands over these few numbers (`Profile.metrics()`), so
the gate never depends on the profiler's types, and a test can state a profile in a line.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpMetric:
    """One aten op's totals over a forward."""

    name: str  # e.g. "aten::addmm"
    calls: int  # per forward
    share: float  # of the profiled op time, 0-1
    dtype: str | None = None  # e.g. "torch.float32"


@dataclass(frozen=True)
class LineMetric:
    """One source line's part of a forward, and what limits it."""

    bound: str  # "memory" | "compute" | "overhead"
    share: float  # of the profiled op time, 0-1


@dataclass(frozen=True)
class ProfileMetrics:
    """A profiled forward: where the time goes and how far from the device's peak it runs."""

    device: str  # "cpu" | "cuda"
    bound: str  # the whole forward's roofline bound
    pct_of_peak: float  # 100 * roofline time / time, capped at 100
    ops: tuple[OpMetric, ...] = ()
    lines: tuple[LineMetric, ...] = ()
