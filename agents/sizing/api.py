"""Parent side of `--size fit`: run the sizing child once and carry its answer as a
`fit:NAME=VALUE,...` size (agents/task.py), which every worker then applies alike.

The parent never imports the problem; other sizes pass through untouched (their memory
check runs inside the reference's worker, see check.py).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import platformdirs

from agents.sandbox.process import Limits, run_child
from agents.sizing.footprint import FORWARD_SECONDS, gb
from agents.task import SourceFile, TaskLoadError, fitted_size

FIT_TIMEOUT_S = 120.0


class SizeError(TaskLoadError):
    """`--size fit` could not choose sizes; the message is one line for the user (a
    TaskLoadError, so every command reports it as a bad problem)."""


@dataclass(frozen=True)
class SizePlan:
    """The size the workers get, and for a fit the sizes chosen: {name: (shipped, used)}."""

    size: str
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    budget_bytes: int | None = None
    note: str | None = None  # why the shipped sizes were kept without an estimate

    def line(self) -> str | None:
        """`sizes: batch_size 16 (shipped 4096) to fit 8.0 GB and 0.1 s a forward`; None
        when nothing was fitted."""
        if not self.size.startswith("fit"):
            return None
        if self.note:
            return f"sizes: as shipped ({self.note})"
        budget = f"{gb(self.budget_bytes or 0)} and {FORWARD_SECONDS:g} s a forward"
        changed = [(n, s, u) for n, (s, u) in self.sizes.items() if s != u]
        if not changed:
            return f"sizes: as shipped (they fit {budget})"
        named = ", ".join(f"{name} {used} (shipped {shipped})" for name, shipped, used in changed)
        return f"sizes: {named} to fit {budget}"

    def to_json(self) -> dict[str, list[int]]:
        """The JSON's `sizes`: {name: [shipped, used]}."""
        return {name: [shipped, used] for name, (shipped, used) in self.sizes.items()}


def resolve_size(
    source: SourceFile,
    size: str,
    *,
    device: str = "cpu",
    threads: int = 1,
    use_jail: bool = True,
    cancel: threading.Event | None = None,
) -> SizePlan:
    """`size` itself unless it is `fit`; then the sandboxed child's choice (SizeError if it
    could not choose)."""
    if size != "fit":
        return SizePlan(size)
    cache = Path(platformdirs.user_cache_dir("kernel-agent"))
    limits = Limits(build_timeout_s=FIT_TIMEOUT_S, run_timeout_s=FIT_TIMEOUT_S)
    outcome = run_child(
        {"reference": {"text": source.text, "path": source.path}, "device": device},
        device=device,
        threads=threads,
        build_cache=cache / "build" / "sizing",
        limits=limits,
        entry="agents.sizing.child",
        use_jail=use_jail,
        cancel=cancel,
    )
    if outcome.cancelled:
        raise SizeError("--size fit was cancelled")
    message = outcome.result
    if message is None:
        how = "took too long" if outcome.timed_out_phase else "ended without an answer"
        raise SizeError(f"{source.label}: --size fit: the sizing process {how}")
    if message.get("error"):
        raise SizeError(str(message["error"]))
    sizes = {name: (int(pair[0]), int(pair[1])) for name, pair in message["sizes"].items()}
    used = {name: pair[1] for name, pair in sizes.items()}
    return SizePlan(fitted_size(used), sizes, message.get("budget_bytes"), message.get("note"))


def fit_settings(settings: Any, reference: SourceFile, cancel: threading.Event | None = None):
    """`settings` (EvalOptions, EvaluationSettings: anything with size, device, threads and
    jail) with `--size fit` resolved for `reference`; as it is for any other size. For a
    door that runs many problems (bench): each problem gets its own fit."""
    if settings.size != "fit":
        return settings
    plan = resolve_size(
        reference,
        "fit",
        device=settings.device,
        threads=settings.threads or 1,
        use_jail=settings.jail,
        cancel=cancel,
    )
    return replace(settings, size=plan.size)
