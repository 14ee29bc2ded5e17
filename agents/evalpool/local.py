"""The `local` backend: sandboxed children on this machine, one thread each in the parent.

A job takes a BUILD slot (parallel, `build_slots` of them) and runs `evaluate`, which starts
the job's two sandboxed workers (reference and candidate) and gives the slot back when it
asks for its device's MEASURE lane (see `agents.sandbox.process.MeasureGate`). The lane is
held until the timing ends, so timings on one device never overlap, while imports, compiles
and correctness trials of other candidates go on (stopped while a timing on their device
runs). CUDA jobs are spread over one lane per GPU, each worker pinned to its GPU with
CUDA_VISIBLE_DEVICES on hosts with more than one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from agents.evalpool.pause import continue_pids, stop_tree
from agents.evalpool.service import EvalEvent, EventCallback, PoolSettings, default_build_slots
from agents.evaluate import EvalCancelled, EvalError, EvalOptions, evaluate
from agents.sandbox.devicelock import DeviceLock, default_lock_dir, device_key
from agents.task import SourceFile
from agents.verify.keeper import ReferenceKeeper
from agents.verify.spares import SpareCandidates
from agents.verify.verdict import EvalResult, Verdict

POLL_S = 0.05


class _Slots:
    """A counting semaphore whose waits end when a cancel event is set."""

    def __init__(self, count: int) -> None:
        self._semaphore = threading.Semaphore(count)

    def acquire(self, cancel: threading.Event) -> bool:
        while not self._semaphore.acquire(timeout=POLL_S):
            if cancel.is_set():
                return False
        if cancel.is_set():
            self._semaphore.release()
            return False
        return True

    def release(self) -> None:
        self._semaphore.release()


class _AnyEvent(threading.Event):
    """Set when it, or any of the events it watches, is set: run_child only polls is_set."""

    def __init__(self, *others: threading.Event | None) -> None:
        super().__init__()
        self._others = [event for event in others if event is not None]

    def is_set(self) -> bool:
        return super().is_set() or any(event.is_set() for event in self._others)


def pin_env(gpu: int, gpus: int, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES for the child of lane `gpu` (of `gpus`): the parent's own list,
    if it has one, is respected. A single-GPU host needs no pinning."""
    if gpus <= 1:
        return {}
    base = os.environ if environ is None else environ
    visible = [v.strip() for v in base.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return {"CUDA_VISIBLE_DEVICES": visible[gpu] if gpu < len(visible) else str(gpu)}


@dataclass
class _Job:
    id: int
    label: str
    lane: str
    env: dict[str, str]
    cancel: _AnyEvent
    listeners: list[EventCallback] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)  # the evaluation's workers (two), spare too
    spares: set[int] = field(default_factory=set)  # a spare booting for a later candidate
    building: bool = False
    pauses: int = 0  # timings now holding this build stopped
    stopped: list[int] = field(default_factory=list)
    paused_since: float = 0.0
    paused_total: float = 0.0

    def paused_s(self) -> float:
        return self.paused_total + (time.monotonic() - self.paused_since if self.pauses else 0.0)


class _Gate:
    """The MeasureGate one job hands its child: frees the build slot, takes the lane."""

    def __init__(self, pool: LocalPool, job: _Job) -> None:
        self._pool = pool
        self._job = job
        self._device: DeviceLock

    @property
    def env(self) -> dict[str, str]:
        return dict(self._job.env)

    def started(self, pid: int) -> None:
        self._pool._started(self._job, pid)

    def spare_started(self, pid: int) -> None:
        """Stopped with the job's workers while another job times, never reported as one."""
        self._job.spares.add(pid)
        self._pool._started(self._job, pid)

    def paused_s(self) -> float:
        """How long this child's build was stopped for other timings (not its own time)."""
        return self._job.paused_s()

    def acquire(self, cancel: threading.Event | None) -> bool:
        self._pool._leave_build(self._job)
        if not self._pool._lanes[self._job.lane].acquire(self._job.cancel):
            return False
        # Then the device machine-wide (other kernel-agent processes), and only then stop
        # this pool's builds: they go on while another process times.
        self._device = DeviceLock(self._pool._lock_dir, self._pool._device_key(self._job))
        if not self._device.acquire(self._job.cancel):
            self._pool._lanes[self._job.lane].release()
            return False
        self._pool._begin_measure(self._job)
        self._pool._emit(self._job, "measuring", self._job.lane)
        return True

    def release(self) -> None:
        self._pool._emit(self._job, "measured", self._job.lane)
        self._pool._end_measure(self._job)
        self._device.release()
        self._pool._lanes[self._job.lane].release()


class LocalPool:
    """Evaluations on this machine: parallel builds, exclusive timing per device."""

    def __init__(
        self, settings: PoolSettings | None = None, on_event: EventCallback | None = None
    ) -> None:
        settings = settings or PoolSettings()
        self.build_slots = settings.build_slots or default_build_slots()
        if self.build_slots < 1:
            raise ValueError("build_slots must be at least 1")
        self._build = _Slots(self.build_slots)
        self._gpus = settings.gpus
        self._lanes: dict[str, _Slots] = {"cpu": _Slots(1)}
        self._load: dict[str, int] = {}
        self._on_event = on_event
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._keeper = ReferenceKeeper(capacity=self.build_slots + 1)
        self._spares = SpareCandidates(capacity=self.build_slots)
        self._jobs: dict[int, _Job] = {}
        self._ids = itertools.count(1)
        self._lock_dir = settings.lock_dir or default_lock_dir()
        self._measuring: dict[int, _Job] = {}  # job id → the job timing now
        self._paused_by: dict[int, list[_Job]] = {}  # timing job id → builds it stopped

    # -- the service --------------------------------------------------------------------------

    async def submit(
        self,
        reference: SourceFile,
        candidate: SourceFile,
        options: EvalOptions,
        cancel: threading.Event | None = None,
        on_event: EventCallback | None = None,
    ) -> EvalResult:
        """Queue `candidate`; its result, or EvalCancelled / EvalError, comes back here."""
        if self._closing.is_set():
            raise EvalCancelled("the evaluation pool is draining")
        job = self._new_job(candidate.label, options.device, cancel, on_event)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[EvalResult] = loop.create_future()

        def settle(result: EvalResult | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)  # type: ignore[arg-type]

        def work() -> None:
            result, error = None, None
            try:
                result = self._run(job, reference, candidate, options)
            except BaseException as caught:  # handed to the awaiting task, never lost
                error = caught
            finally:
                with self._lock:
                    self._jobs.pop(job.id, None)
                    self._load[job.lane] -= 1
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits
                loop.call_soon_threadsafe(settle, result, error)

        self._emit(job, "queued", "build")
        threading.Thread(target=work, name=f"evalpool-job-{job.id}", daemon=True).start()
        try:
            return await future
        except asyncio.CancelledError:
            job.cancel.set()  # the child is killed within a fraction of a second
            raise

    def cancel_all(self) -> None:
        self._closing.set()

    def reopen(self) -> None:
        """Accept submissions again after `cancel_all`, once the drained jobs have ended."""
        self._closing.clear()
        self._keeper.reopen()
        self._spares.reopen()

    def close(self) -> None:
        """Drain what still runs and close the warm workers kept between jobs."""
        self.cancel_all()
        self._keeper.close()
        self._spares.close()

    def release_warm_workers(self) -> None:
        """Close the reference workers kept warm and the spare candidate workers; later jobs
        start and keep new ones."""
        for kept in (self._keeper, self._spares):
            kept.close()
            kept.reopen()

    def warm_reference_pids(self) -> list[int]:
        """The reference workers kept warm between jobs (agents/verify/keeper.py)."""
        return self._keeper.idle_pids()

    def spare_candidate_pids(self) -> list[int]:
        """The candidate workers booted ahead of their candidate (agents/verify/spares.py)."""
        return self._spares.idle_pids()

    def running_pids(self) -> list[int]:
        """Process ids of the children now alive (tests kill them; the server reports them)."""
        with self._lock:
            return [pid for job in self._jobs.values() for pid in job.pids if pid not in job.spares]

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._jobs)

    # -- one job --------------------------------------------------------------------------------

    def _new_job(self, label, device, cancel, on_event) -> _Job:
        with self._lock:
            lane, env = self._pick_lane(device)
            job = _Job(
                id=next(self._ids),
                label=label,
                lane=lane,
                env=env,
                cancel=_AnyEvent(cancel, self._closing),
                listeners=[on_event] if on_event else [],
            )
            self._jobs[job.id] = job
            self._load[lane] = self._load.get(lane, 0) + 1
        return job

    def _pick_lane(self, device: str) -> tuple[str, dict[str, str]]:
        """cpu: the one cpu lane. cuda: the GPU lane with the fewest jobs assigned."""
        if device != "cuda":
            return "cpu", {}
        gpus = self._gpu_count()
        names = [f"cuda:{index}" for index in range(gpus)] or ["cuda:0"]
        for name in names:
            self._lanes.setdefault(name, _Slots(1))
        index = min(range(len(names)), key=lambda i: (self._load.get(names[i], 0), i))
        return names[index], pin_env(index, gpus)

    def _gpu_count(self) -> int:
        if self._gpus is None:
            try:
                import torch

                self._gpus = torch.cuda.device_count()
            except Exception:
                self._gpus = 0
        return self._gpus

    def _run(
        self, job: _Job, reference: SourceFile, candidate: SourceFile, options: EvalOptions
    ) -> EvalResult:
        verdict = "cancelled"
        try:
            if not self._build.acquire(job.cancel):
                raise EvalCancelled("cancelled while queued")
            job.building = True
            self._emit(job, "building", "build")
            try:
                result = evaluate(
                    reference,
                    candidate,
                    options,
                    job.cancel,
                    gate=_Gate(self, job),
                    keeper=self._keeper,
                    spares=self._spares,
                    on_phase=lambda phase: self._emit(job, "phase", job.lane, detail=phase.text),
                )
            except (EvalCancelled, EvalError):
                raise
            except Exception as error:  # the worker itself failed: still a verdict
                result = EvalResult(
                    Verdict.RUNTIME_ERROR,
                    [f"the evaluation worker failed: {type(error).__name__}: {error}"],
                    device=options.device,
                )
            verdict = result.verdict.value
            return result
        except EvalError:
            verdict = "error"
            raise
        finally:
            self._leave_build(job)
            job.pids = []
            self._emit(job, "done", job.lane, verdict)

    @staticmethod
    def _device_key(job: _Job) -> str:
        """The physical device a job times on, as the machine-wide lock names it."""
        return device_key(job.lane.split(":")[0], job.env)  # unpinned: one GPU, lane cuda:0

    # -- builds stop while a timing on their device runs ----------------------------------------

    @staticmethod
    def _disturbs(build: _Job, timing: _Job) -> bool:
        """A CPU timing is disturbed by every build on this machine; a GPU's, by the builds
        of candidates on that GPU (their correctness trials run there)."""
        return build.building and (timing.lane == "cpu" or build.lane == timing.lane)

    def _started(self, job: _Job, pid: int) -> None:
        with self._lock:
            job.pids.append(pid)
            for timing in self._measuring.values():
                if self._disturbs(job, timing):
                    if job.pauses:  # already stopped: stop the new worker with the others
                        job.stopped += stop_tree(pid)
                        continue
                    self._pause(job)
                    self._paused_by[timing.id].append(job)

    def _begin_measure(self, timing: _Job) -> None:
        with self._lock:
            self._measuring[timing.id] = timing
            paused = [j for j in self._jobs.values() if j.pids and self._disturbs(j, timing)]
            self._paused_by[timing.id] = paused
            for job in paused:
                self._pause(job)

    def _end_measure(self, timing: _Job) -> None:
        with self._lock:
            self._measuring.pop(timing.id, None)
            for job in self._paused_by.pop(timing.id, []):
                self._resume(job)

    @staticmethod
    def _pause(job: _Job) -> None:
        job.pauses += 1
        if job.pauses == 1 and job.pids:
            job.paused_since = time.monotonic()
            job.stopped = [pid for root in job.pids for pid in stop_tree(root)]

    @staticmethod
    def _resume(job: _Job) -> None:
        job.pauses -= 1
        if job.pauses == 0:
            continue_pids(job.stopped)
            job.paused_total += time.monotonic() - job.paused_since
            job.stopped = []

    def _leave_build(self, job: _Job) -> None:
        with self._lock:
            held, job.building = job.building, False
        if held:
            self._build.release()

    def _emit(
        self, job: _Job, kind: str, lane: str, verdict: str | None = None, detail: str = ""
    ) -> None:
        event = EvalEvent(kind, job.id, lane, time.monotonic(), job.label, verdict, detail)
        for listener in (self._on_event, *job.listeners):
            if listener is None:
                continue
            with contextlib.suppress(Exception):  # a broken listener must not lose a verdict
                listener(event)
