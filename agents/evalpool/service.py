"""What the search (and later the server) sees of an evaluation pool: submit, events, cancel.

A backend (`local`, or `ray` for a Ray cluster) decides where candidates run. Every backend
keeps one promise: no two timings on the same device overlap, whatever else runs in parallel.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agents.evaluate import EvalError, EvalOptions
from agents.request.defaults import EVAL_BACKENDS
from agents.task import SourceFile
from agents.verify.verdict import EvalResult

BACKENDS = EVAL_BACKENDS  # where a pool can run; defined with every other default


class PoolSetupError(EvalError, ValueError):
    """The backend cannot be set up as asked (unknown name, Ray missing): one line."""


EVENT_KINDS = ("queued", "building", "phase", "measuring", "measured", "done")
"""`phase` is sent as the evaluation enters a phase, named in `detail` (agents/verify/phases.py:
"correctness 2/5", "timing"; the local backend only: a Ray task reports no phases);
`measuring` when a job enters its device's measure lane, `measured` when it leaves it; `done`
carries the verdict (or `cancelled` / `error`)."""


@dataclass(frozen=True)
class EvalEvent:
    """One step of one submitted evaluation, with the lane it concerns and when."""

    kind: str
    job: int
    lane: str  # "build", or a measure lane: "cpu", "cuda:0", ...
    time: float  # time.monotonic() in the pool's process
    label: str = ""
    verdict: str | None = None
    detail: str = ""  # a `phase` event's phase in words


EventCallback = Callable[[EvalEvent], None]


@dataclass(frozen=True)
class PoolSettings:
    """Concurrency limits; None picks a default from this machine."""

    backend: str = "local"  # or "ray"
    build_slots: int | None = None  # None: max(1, cores - 1), one core left for timing
    gpus: int | None = None  # None: as many as torch sees (only asked on a first cuda job)
    lock_dir: Path | None = None  # machine-wide measure locks; None: the user cache directory
    # The ray backend (agents/evalpool/ray_pool.py):
    ray_address: str | None = None  # None: $RAY_ADDRESS, else a local Ray started here
    ray_num_cpus: int | None = None  # a local Ray's CPUs; None: build_slots + 1, else all
    ray_gpu_builds: int = 4  # cuda build/check tasks that may share one GPU (never a timing)


def default_build_slots() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


class EvalService(Protocol):
    """The interface every backend offers."""

    async def submit(
        self,
        reference: SourceFile,
        candidate: SourceFile,
        options: EvalOptions,
        cancel: threading.Event | None = None,
        on_event: EventCallback | None = None,
    ) -> EvalResult:
        """Judge `candidate`; raises EvalCancelled when cancelled (by `cancel`, by
        `cancel_all`, or by cancelling the awaiting task), EvalError for a bad request."""
        ...

    def cancel_all(self) -> None:
        """Drain: queued jobs end cancelled, running children are killed, and new
        submissions are refused, until `reopen`."""
        ...

    def reopen(self) -> None:
        """Accept submissions again after `cancel_all`."""
        ...

    def close(self) -> None:
        """End the pool: what still runs is cancelled, and what the pool started (a local
        Ray) is shut down."""
        ...
