"""The `ray` backend: each candidate is two Ray tasks, and Ray's scheduler keeps timings apart.

* BUILD/check (`num_cpus=1`; cuda: also `1/ray_gpu_builds` of a GPU): `evaluate` with
  `measure=False`: imports, compiles and correctness trials, warming the node's caches. A verdict
  other than correct is final.
* MEASURE: the full `evaluate` (it re-checks correctness: the build task's verdict is never
  trusted), preferably on the node that built it (soft node affinity). cuda: a whole GPU, so no
  check task shares it while it times; cpu: the `kernel_agent_cpu_timer` resource, which each
  node declares once, so one CPU timing at a time per node, and all of that node's CPUs, so no
  build runs beside it (Ray starts it once the node's running tasks are done).

Both run `agents.evaluate.evaluate` in a Ray worker, which starts the same sandboxed child (jail,
limits, scrubbed environment) as the local backend. The `agents` and `memory` packages
travel in the task's `runtime_env` (`py_modules`), so the child, which finds them through
`agents.sandbox.jail.shipped_package_dirs()`, runs that copy; sources and options are task
arguments. No credential goes into either.

A task is a Ray generator: it yields `started` (node, pid, clock), then its result, so
`building`/`measuring` are sent when the work really starts (on the worker's clock where it is
this machine's). A worker that
dies is retried once by Ray (`max_retries=1`); a second death is a `runtime_error` verdict.
Cancelling (the caller's event, the awaiting task, `cancel_all`) cancels the Ray tasks: the
worker's loop is interrupted and kills the child's process group; after a grace period the
worker itself is killed, and the child with it (it has PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from agents.evalpool.service import EvalEvent, EventCallback, PoolSettings
from agents.evaluate import EvalCancelled, EvalError, EvalOptions, evaluate
from agents.sandbox.jail import SHIPPED_PACKAGES, project_root
from agents.task import SourceFile
from agents.verify.verdict import EvalResult, Verdict

CPU_TIMER = "kernel_agent_cpu_timer"
"""A custom resource each node declares with quantity 1: a CPU timing holds it."""
POLL_S = 0.05
CANCEL_GRACE_S = 3.0
"""After a polite cancel, how long a running task has before its worker is killed."""
PACKAGES = [str(project_root() / name) for name in SHIPPED_PACKAGES]
"""The project's packages a sandboxed child may import (agents/ and memory/, never server/),
shipped to the workers; each lands in a folder of its own there, on PYTHONPATH."""
RUNTIME_ENV: dict[str, Any] = {
    "py_modules": PACKAGES,
    "excludes": ["__pycache__", "*.pyc"],
}
"""What the workers need of this project. No env_vars: the child's environment is built by
the sandbox (scrubbed) from the worker's, where Ray already sets CUDA_VISIBLE_DEVICES."""
_shipped_with_job = False
"""True once this module's own ray.init shipped the package to every task of the job."""


def check_cluster(resources: Mapping[str, float], device: str, address: str) -> None:
    """Refuse, in one line, a job that no node of the cluster could ever run (Ray would wait
    for it forever)."""
    if device == "cuda":
        if resources.get("GPU", 0) < 1:
            raise EvalError(
                f"the Ray cluster at {address} has no GPUs: add GPU nodes "
                "(ray start --num-gpus=N ...) or use --device cpu"
            )
    elif resources.get(CPU_TIMER, 0) < 1:
        raise EvalError(
            f"the Ray cluster at {address} has no {CPU_TIMER} resource, so CPU timings could "
            f"overlap: start each node with ray start ... --resources='{{\"{CPU_TIMER}\": 1}}'"
        )
    if resources.get("CPU", 0) < 1:
        raise EvalError(f"the Ray cluster at {address} has no CPUs to evaluate on")


def task_runtime_env() -> dict[str, Any]:
    """The package as a per-task runtime_env, for a Ray someone else initialised: Ray takes
    local directories only in ray.init, so it is uploaded here (Ray's own helper) as a URI."""
    try:
        from ray._private.runtime_env.py_modules import upload_py_modules_if_needed

        node = ray._private.worker.global_worker.node
        env = upload_py_modules_if_needed(
            dict(RUNTIME_ENV),
            include_gitignore=True,
            scratch_dir=node.get_runtime_env_dir_path(),
        )
    except Exception as error:
        raise EvalError(
            "cannot ship the agents and memory packages to the Ray workers "
            f"({type(error).__name__}: {error}): let the pool start Ray, or call "
            f"ray.init(runtime_env={RUNTIME_ENV!r})"
        ) from None
    env.pop("excludes", None)
    return env


PROBE_TIMEOUT_S = 5.0


def _probe(address: str) -> None:
    """Fail in seconds, with one line, where ray.init would retry an unreachable head for
    minutes. Only host:port forms are probed ("auto" and the like go to Ray as they are)."""
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), PROBE_TIMEOUT_S).close()
    except OSError as error:
        raise EvalError(
            f"cannot reach the Ray cluster at {address} ({error.strerror or error}): check "
            "--ray-address / RAY_ADDRESS and that `ray start --head` runs there"
        ) from None


@contextlib.contextmanager
def _without_secrets():
    """os.environ without API keys and other secrets while a local Ray starts: its processes
    copy the environment, and nothing they run should see a key (Ray's own settings stay)."""
    from agents.sandbox.env import is_sensitive

    hidden = {
        name: os.environ.pop(name)
        for name in list(os.environ)
        if is_sensitive(name) and not name.startswith("RAY_")
    }
    try:
        yield
    finally:
        os.environ.update(hidden)


def _boot_id() -> str:
    """Which running kernel: time.monotonic() values compare only within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


# -- inside the Ray worker -----------------------------------------------------------------------


def _where() -> dict[str, Any]:
    context = ray.get_runtime_context()
    return {
        "node": context.get_node_id(),
        "ip": ray.util.get_node_ip_address(),
        "pid": os.getpid(),
        "boot": _boot_id(),
        "time": time.monotonic(),
        "gpus": [str(gpu) for gpu in context.get_accelerator_ids().get("GPU", [])],
    }


def _judge_in_worker(reference: SourceFile, candidate: SourceFile, options: EvalOptions):
    """The body of both tasks. Yields exactly two items, so a retried task's items line up
    with those of its first attempt: ("started", where), then ("result", EvalResult, time) or
    ("error", kind, message, time). Nothing is yielded while the child runs: ray.cancel raises
    KeyboardInterrupt in the main thread, and only then is it sure to land in this frame."""
    yield ("started", _where())
    cancel = threading.Event()
    finished = threading.Event()  # not Thread.is_alive: an interrupted join() can break it
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["result"] = evaluate(reference, candidate, options, cancel)
        except BaseException as error:
            outcome["error"] = error
        finally:
            finished.set()

    try:
        threading.Thread(target=work, name="kernel-agent-evaluate", daemon=True).start()
        while not finished.wait(POLL_S):  # short waits: the interrupt lands between them
            pass
    finally:
        if not finished.is_set():  # cancelled, or the generator was closed: kill the child
            cancel.set()  # run_child kills the child's process group within 0.2 s
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                with contextlib.suppress(KeyboardInterrupt):
                    if finished.wait(POLL_S):
                        break
    error = outcome.get("error")
    if error is None:
        yield ("result", outcome["result"], time.monotonic())
    elif isinstance(error, EvalError | EvalCancelled):
        yield ("error", type(error).__name__, str(error), time.monotonic())
    else:
        yield ("error", "worker", f"{type(error).__name__}: {error}", time.monotonic())


_remote_judge = ray.remote(max_retries=1)(_judge_in_worker)


# -- in the pool's process -----------------------------------------------------------------------


@dataclass
class _Job:
    id: int
    label: str
    device: str
    caller: threading.Event | None
    listeners: list[EventCallback] = field(default_factory=list)
    own: threading.Event = field(default_factory=threading.Event)
    streams: list[Any] = field(default_factory=list)  # the live ObjectRefGenerators
    measuring: str | None = None  # the lane, between `measuring` and `measured`


class RayPool:
    """Evaluations on a Ray cluster (or a local Ray started here): the `EvalService` API."""

    def __init__(
        self, settings: PoolSettings | None = None, on_event: EventCallback | None = None
    ) -> None:
        settings = settings or PoolSettings(backend="ray")
        if settings.ray_gpu_builds < 1:
            raise ValueError("ray_gpu_builds must be at least 1")
        self._gpu_builds = settings.ray_gpu_builds
        self._on_event = on_event
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._jobs: dict[int, _Job] = {}
        self._ids = itertools.count(1)
        self._checked: set[str] = set()
        self._cpus: dict[str, float] = {}  # node id → its CPUs, for CPU timings
        self._timers: set[threading.Timer] = set()  # forced cancels waiting for their time
        self._shut = False
        self._boot = _boot_id()
        self.address, self.owns_ray = self._connect(settings)
        self._node = ray.get_runtime_context().get_node_id()
        self._runtime_env = None if _shipped_with_job else task_runtime_env()

    @staticmethod
    def _connect(settings: PoolSettings) -> tuple[str, bool]:
        """Join the Ray this process already runs, the cluster named by the settings or
        RAY_ADDRESS, or else start a local one (declaring the CPU timer resource)."""
        global _shipped_with_job
        if ray.is_initialized():
            return ray.get_runtime_context().gcs_address, False
        # An empty working_dir as well: without one, Ray puts the driver's current directory
        # first on the workers' sys.path, and a driver started in a checkout would have the
        # workers (and their children) import that checkout instead of the shipped copy.
        empty = tempfile.mkdtemp(prefix="kernel-agent-ray-")
        common = {
            "log_to_driver": False,
            "logging_level": "warning",
            "runtime_env": {**RUNTIME_ENV, "working_dir": empty},
        }
        address = settings.ray_address or os.environ.get("RAY_ADDRESS")
        try:
            if address:
                _probe(address)
                try:
                    ray.init(address=address, **common)
                except (ConnectionError, RuntimeError, ValueError) as error:
                    raise EvalError(
                        f"cannot connect to the Ray cluster at {address}: {_first_line(error)}"
                    ) from None
            else:
                cpus = settings.ray_num_cpus
                if cpus is None and settings.build_slots:
                    cpus = settings.build_slots + 1
                with _without_secrets():  # the raylet and its workers inherit os.environ
                    ray.init(
                        address="local",
                        num_cpus=cpus,
                        num_gpus=settings.gpus,
                        resources={CPU_TIMER: 1},
                        include_dashboard=False,
                        **common,
                    )
        finally:
            shutil.rmtree(empty, ignore_errors=True)  # uploaded by ray.init already
        _shipped_with_job = True
        return address or "local", True

    def close(self) -> None:
        """Cancel what runs; shut Ray down if this pool started or joined it."""
        global _shipped_with_job
        self.cancel_all()
        with self._lock:
            self._shut = True
            timers, self._timers = list(self._timers), set()
        for timer in timers:  # no ray.cancel may run into (or after) the shutdown
            timer.cancel()
            timer.join()
        if self.owns_ray and ray.is_initialized():
            ray.shutdown()
            _shipped_with_job = False

    # -- the service --------------------------------------------------------------------------

    async def submit(
        self,
        reference: SourceFile,
        candidate: SourceFile,
        options: EvalOptions,
        cancel: threading.Event | None = None,
        on_event: EventCallback | None = None,
    ) -> EvalResult:
        """Judge `candidate` on the cluster; its result, or EvalCancelled / EvalError."""
        if self._closing.is_set():
            raise EvalCancelled("the evaluation pool is draining")
        self._check(options.device)
        if options.cache_dir is not None and not options.cache_dir.is_absolute():
            options = replace(options, cache_dir=options.cache_dir.resolve())  # workers' cwd
        job = _Job(
            id=next(self._ids),
            label=candidate.label,
            device=options.device,
            caller=cancel,
            listeners=[on_event] if on_event else [],
        )
        with self._lock:
            self._jobs[job.id] = job
        self._emit(job, "queued", "build")
        verdict = "cancelled"
        drive = asyncio.ensure_future(self._drive(job, reference, candidate, options))
        try:
            while not drive.done():
                await asyncio.wait({drive}, timeout=POLL_S)
                if not drive.done() and self._cancelled(job):
                    self._cancel(job)
                    drive.cancel()
                    with contextlib.suppress(BaseException):
                        await drive
                    raise EvalCancelled("cancelled")
            result = drive.result()
            verdict = result.verdict.value
            return result
        except asyncio.CancelledError:
            self._cancel(job)
            drive.cancel()
            raise
        except EvalError:
            verdict = "error"
            raise
        finally:
            with self._lock:
                self._jobs.pop(job.id, None)
            if job.measuring is not None:
                self._emit(job, "measured", job.measuring)
                job.measuring = None
            self._emit(job, "done", "build", verdict=verdict)

    def cancel_all(self) -> None:
        """Drain: every job's Ray tasks are cancelled, new submissions refused until `reopen`."""
        self._closing.set()
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            self._cancel(job)

    def reopen(self) -> None:
        self._closing.clear()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._jobs)

    # -- one job --------------------------------------------------------------------------------

    def _check(self, device: str) -> None:
        if device in self._checked:
            return
        check_cluster(ray.cluster_resources(), device, self.address)
        self._checked.add(device)

    def _cancelled(self, job: _Job) -> bool:
        return (
            job.own.is_set()
            or self._closing.is_set()
            or (job.caller is not None and job.caller.is_set())
        )

    def _cancel(self, job: _Job) -> None:
        """Cancel the job's Ray tasks: politely now (the worker kills the child's group), by
        killing the worker after CANCEL_GRACE_S if the task is still running then."""
        with self._lock:
            first = not job.own.is_set()
            job.own.set()
            streams = list(job.streams)
        if not first:
            return
        for stream in streams:
            self._cancel_stream(stream)

    def _cancel_stream(self, stream: Any) -> None:
        with contextlib.suppress(Exception):
            ray.cancel(stream)
        timer = threading.Timer(CANCEL_GRACE_S, self._force_cancel, args=(stream,))
        timer.daemon = True
        with self._lock:
            if self._shut:
                return
            self._timers.add(timer)
        timer.start()

    def _force_cancel(self, stream: Any) -> None:
        with self._lock:
            self._timers.discard(threading.current_thread())  # type: ignore[arg-type]
            if self._shut:
                return
            with contextlib.suppress(Exception):  # finished meanwhile: nothing happens
                ray.cancel(stream, force=True)

    async def _drive(
        self, job: _Job, reference: SourceFile, candidate: SourceFile, options: EvalOptions
    ) -> EvalResult:
        device = options.device
        build = _remote_judge.options(
            num_cpus=1,
            num_gpus=1 / self._gpu_builds if device == "cuda" else 0,
            runtime_env=self._runtime_env,
        )

        def building(where: dict[str, Any]) -> None:
            self._emit(job, "building", "build", self._time(where, where["time"]))

        result, where = await self._run(
            job, build, reference, candidate, replace(options, measure=False), building
        )
        if not result.correct or not options.measure:
            return result
        strategy: Any = "DEFAULT"
        if where is not None:
            strategy = NodeAffinitySchedulingStrategy(node_id=where["node"], soft=True)
        if device == "cuda":
            measure = _remote_judge.options(
                num_cpus=1, num_gpus=1, scheduling_strategy=strategy, runtime_env=self._runtime_env
            )
        else:
            # Every CPU of the node, so no build (nor anything else of ours) runs beside the
            # timing there: a build beside a CPU timing slowed it 2-14x on 2 cores.
            measure = _remote_judge.options(
                num_cpus=self._node_cpus(where["node"] if where else None),
                resources={CPU_TIMER: 1},
                scheduling_strategy=strategy,
                runtime_env=self._runtime_env,
            )

        def measuring(where: dict[str, Any]) -> None:
            job.measuring = self._lane(device, where)
            self._emit(job, "measuring", job.measuring, self._time(where, where["time"]))

        def measured(where: dict[str, Any], at: float) -> None:
            if job.measuring is not None:
                self._emit(job, "measured", job.measuring, self._time(where, at))
                job.measuring = None

        result, _ = await self._run(
            job, measure, reference, candidate, options, measuring, measured
        )
        return result

    async def _run(
        self,
        job: _Job,
        task: Any,
        reference: SourceFile,
        candidate: SourceFile,
        options: EvalOptions,
        on_start: Callable[[dict[str, Any]], None],
        on_end: Callable[[dict[str, Any], float], None] | None = None,
    ) -> tuple[EvalResult, dict[str, Any] | None]:
        """One Ray task, followed to its result: (result, where it started)."""
        if self._cancelled(job):
            raise EvalCancelled("cancelled")
        stream = task.remote(reference, candidate, options)
        with self._lock:
            job.streams.append(stream)
            late = job.own.is_set()  # cancelled between the check and now
        if late:
            self._cancel_stream(stream)
        where: dict[str, Any] | None = None
        try:
            async for ref in stream:
                item = await ref
                if item[0] == "started":
                    where = item[1]
                    on_start(where)
                else:
                    if on_end is not None and where is not None:
                        on_end(where, item[-1])
                    if item[0] == "result":
                        return item[1], where
                    return self._raised(item[1], item[2], options), where
            raise EvalError("the Ray task ended without a result")
        except ray.exceptions.TaskCancelledError:
            raise EvalCancelled("cancelled") from None
        except ray.exceptions.RuntimeEnvSetupError as error:
            raise EvalError(f"Ray could not set up the workers: {_first_line(error)}") from None
        except ray.exceptions.RayTaskError as error:  # raised outside `evaluate`
            cause = getattr(error, "cause", None) or error
            failed = f"the evaluation worker failed: {type(cause).__name__}: {_first_line(cause)}"
            return _failed(failed, options), where
        except ray.exceptions.RayError as error:
            if self._cancelled(job):  # a worker killed by our own forced cancel
                raise EvalCancelled("cancelled") from None
            died = f"the Ray worker died twice: {type(error).__name__}: {_first_line(error)}"
            return _failed(died, options), where
        finally:
            with self._lock:
                job.streams.remove(stream)

    @staticmethod
    def _raised(kind: str, message: str, options: EvalOptions) -> EvalResult:
        if kind == "EvalError":
            raise EvalError(message)
        if kind == "EvalCancelled":
            raise EvalCancelled(message)
        return _failed(f"the evaluation worker failed: {message}", options)

    def _node_cpus(self, node: str | None) -> float:
        """The CPUs of `node` (the one that built the candidate), 1 if it is unknown."""
        if node is None:
            return 1
        if node not in self._cpus:
            with contextlib.suppress(Exception):
                for entry in ray.nodes():
                    if entry.get("Alive"):
                        self._cpus[entry["NodeID"]] = entry.get("Resources", {}).get("CPU", 1)
        return self._cpus.get(node, 1)

    def _lane(self, device: str, where: dict[str, Any]) -> str:
        lane = "cpu" if device != "cuda" else f"cuda:{(where['gpus'] or ['0'])[0]}"
        return lane if where["node"] == self._node else f"{lane}@{where['ip']}"

    def _time(self, where: dict[str, Any], at: float) -> float:
        """The worker's clock where it is this machine's, else the time of arrival here."""
        return at if where["boot"] == self._boot else time.monotonic()

    def _emit(
        self,
        job: _Job,
        kind: str,
        lane: str,
        at: float | None = None,
        verdict: str | None = None,
    ) -> None:
        at = time.monotonic() if at is None else at
        event = EvalEvent(kind, job.id, lane, at, job.label, verdict)
        for listener in (self._on_event, *job.listeners):
            if listener is None:
                continue
            with contextlib.suppress(Exception):  # a broken listener must not lose a verdict
                listener(event)


def _failed(reason: str, options: EvalOptions) -> EvalResult:
    return EvalResult(Verdict.RUNTIME_ERROR, [reason], device=options.device)


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(error).__name__
