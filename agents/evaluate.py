"""`evaluate`: the one function that judges a candidate against a reference.

The CLI, the search and the language server all call it. It parses both files (never runs
them here) and applies the static checker; then it starts two sandboxed workers, one for the
reference and one for the candidate, and runs the protocol between them from here
(agents/verify/judge.py): it compares their outputs as data and times them from outside, so
nothing the candidate can reach decides its verdict.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

from agents.request.defaults import DEVICES, EVAL_TIMING_BUDGET_S, MIN_TRIALS
from agents.request.requests import EvaluateRequest
from agents.sandbox.caches import sweep_caches
from agents.sandbox.cpus import free_cpus
from agents.sandbox.devicelock import DeviceGate
from agents.sandbox.launch import JailUnavailable
from agents.sandbox.peer import Peer
from agents.sandbox.process import Limits, MeasureGate
from agents.sandbox.wire import Cancelled
from agents.task import (
    SourceFile,
    TaskLoadError,
    check_size,
    outline_candidate,
    outline_problem,
)
from agents.textsafe import clean_text
from agents.verify.keeper import ReferenceKeeper, reference_key
from agents.verify.phases import PhaseCallback, PhaseClock
from agents.verify.spares import Booting, SpareCandidates, candidate_key, link_cache
from agents.verify.static_check import check_candidate, uses_low_precision
from agents.verify.verdict import EvalResult, ReviewFindings, Verdict
from agents.verify.workers import WorkerSettings, WorkerStartFailed, say_hello, start_worker

if TYPE_CHECKING:
    from agents.verify.judge import JudgeRequest


class EvalError(Exception):
    """The request itself is wrong (bad reference, unknown device): a usage error."""


class EvalCancelled(Exception):
    """The caller's cancel event was set; the child was killed and no verdict exists."""


@dataclass(frozen=True)
class EvalOptions:
    """How to judge: device, trials, seeds, limits, and what to require."""

    device: str = "cpu"
    size: str = "default"
    trials: int = MIN_TRIALS
    # Seeds the init only (get_init_inputs, Model's weights), so a user can rebuild the same
    # model; None draws one. Trial and timed inputs never derive from it: each has its own
    # seed from the system's randomness (agents/verify/judge.py, clock.py).
    seed: int | None = None
    threads: int | None = None
    measure: bool = True
    timing_budget_s: float = EVAL_TIMING_BUDGET_S
    timing_min_runs: int = 10
    timing_max_runs: int = 200
    cuda_graph: bool = False
    require_state_dict: bool = False
    jail: bool = True
    static_check: bool = True  # off only in tests that prove the runtime checks on their own
    limits: Limits = field(default_factory=Limits)
    cache_dir: Path | None = None


def default_threads() -> int:
    """The CPUs other work leaves free (agents/sandbox/cpus.py): a thread pool wider than
    them makes every op's barrier wait a time slice for a thread a busy process holds (beside
    two busy loops the demo's rewrite timed 21 ms on 2 threads, 0.62 ms on 1)."""
    return free_cpus()


def cache_dir(options: EvalOptions) -> Path:
    return options.cache_dir or Path(platformdirs.user_cache_dir("kernel-agent"))


def evaluate(
    reference: SourceFile,
    candidate: SourceFile,
    options: EvalOptions,
    cancel: threading.Event | None = None,
    gate: MeasureGate | None = None,
    keeper: ReferenceKeeper | None = None,
    spares: SpareCandidates | None = None,
    on_phase: PhaseCallback | None = None,
) -> EvalResult:
    """Judge `candidate` against `reference`. Raises EvalError only for a bad request, and
    EvalCancelled when `cancel` is set before a verdict arrives. `gate` (see
    `agents.evalpool`) decides when the child may start timing; without one, the child times
    only while it holds its device's machine-wide lock (`DeviceGate`). With `keeper`, the
    reference's worker is taken warm from it when one is idle and given back after; with
    `spares`, the candidate's worker is a spare booted during an earlier evaluation when one
    is idle, and a spare for the next candidate boots during this one's build. `on_phase`
    hears each phase as it begins (agents/verify/phases.py: "correctness 2/5"), on this
    thread; what it raises is ignored."""
    refused = _static_verdict(reference, candidate, options)
    if refused is not None:
        return refused
    seed = options.seed if options.seed is not None else secrets.randbelow(2**31 - 10_000)
    gate = gate or DeviceGate(options.device)
    started = time.monotonic()
    phases = PhaseClock(getattr(gate, "paused_s", None) or (lambda: 0.0), on_phase)
    settings = WorkerSettings(
        device=options.device,
        threads=options.threads or default_threads(),
        limits=options.limits,
        jail=options.jail,
        env_extra=dict(gate.env),
        cancelled=(lambda: cancel is not None and cancel.is_set()),
        paused_s=phases.paused_s,
    )
    workers = _Workers(reference, candidate, options, settings, keeper, spares)
    findings, over_quota = workers.judge(seed, gate, phases, cancel)
    # A caller that cancelled gets no verdict, even when a worker ended in the same instant.
    _raise_if_cancelled(cancel)
    return _final_verdict(
        findings,
        options,
        over_quota=over_quota,
        device=options.device,
        seed=seed,
        isolation=workers.candidate_peer.isolation,
        elapsed_s=round(time.monotonic() - started, 3),
        phase_s=phases.stop(),
        parent_peak_rss_bytes=peak_rss_bytes(),
    )


def _static_verdict(
    reference: SourceFile, candidate: SourceFile, options: EvalOptions
) -> EvalResult | None:
    """What is decided without running anything: a bad request (EvalError), a candidate
    that does not parse, or one the static checker rejects; None when it must be run."""
    if options.device not in DEVICES:
        raise EvalError(f"unknown device {options.device!r}: use one of {', '.join(DEVICES)}")
    try:
        check_size(options.size)
    except TaskLoadError as error:
        raise EvalError(str(error)) from None
    if options.trials < MIN_TRIALS:
        raise EvalError(f"at least {MIN_TRIALS} correctness trials are required")
    try:
        outline_problem(reference)
    except TaskLoadError as error:
        raise EvalError(str(error)) from None
    if options.device == "cuda":
        _require_cuda()
    try:
        outline_candidate(candidate)
    except TaskLoadError as error:
        return EvalResult(Verdict.COMPILE_ERROR, [str(error)], device=options.device)
    if not options.static_check:
        return None
    findings = check_candidate(
        candidate.text, reference_is_fp32=not uses_low_precision(reference.text)
    )
    if not findings:
        return None
    return EvalResult(
        Verdict.REJECTED,
        [f"{candidate.label}:{f.line}: {f.message} [{f.rule}]" for f in findings],
        device=options.device,
        isolation="static check only: the candidate was never run",
        static_findings=[{"rule": f.rule, "line": f.line, "message": f.message} for f in findings],
    )


class _Workers:
    """The two sandboxed workers of one evaluation: taken warm from the keeper and the
    spares when they have one, started otherwise, and given back or closed after."""

    def __init__(
        self,
        reference: SourceFile,
        candidate: SourceFile,
        options: EvalOptions,
        settings: WorkerSettings,
        keeper: ReferenceKeeper | None,
        spares: SpareCandidates | None,
    ) -> None:
        self.reference, self.candidate, self.options = reference, candidate, options
        self.settings, self.keeper, self.spares = settings, keeper, spares
        source_hash = hashlib.sha256(candidate.text.encode()).hexdigest()[:16]
        self.own_cache = cache_dir(options) / "build" / source_hash
        self.key = reference_key(reference, settings, options.size)
        self.spare_key = candidate_key(settings)
        self.reference_peer: Peer | None = None
        self.candidate_peer: Peer | None = None
        self.booting: Booting | None = None
        self.judged = False

    def judge(self, seed: int, gate, phases: PhaseClock, cancel: threading.Event | None):
        """Start (or take) the workers, run the judge between them, and let them go: the
        judge's findings and whether the candidate's cache outgrew its quota."""
        from agents.verify.judge import Judge, ReferenceBroken  # torch: only when judging

        try:
            self._start(gate)
            judge = Judge(
                _judge_request(self.reference, self.candidate, self.options, seed),
                self.reference_peer,
                self.candidate_peer,
                phase=phases.switch,
                # A spare still booting would share the machine with this timing: wait for it.
                acquire=lambda: (
                    (self.booting is None or self.booting.wait()) and gate.acquire(cancel)
                ),
                release=gate.release,
            )
            findings = judge.run()
            self.judged = True
            return findings, self.candidate_peer.launched.cache_over_quota()
        except WorkerStartFailed as error:
            _raise_if_cancelled(cancel)
            if self._candidate_cache_burst():
                # Its source's cache outgrew the quota before it said hello (a writer that
                # takes no lock filled it: runs of one source never share a cache now, see
                # agents/sandbox/caches.py): the source's fault.
                return ReviewFindings(verdict=Verdict.REJECTED), True
            raise EvalError(f"{error}; try --no-jail to compare") from None
        except ReferenceBroken as error:
            _raise_if_cancelled(cancel)
            raise EvalError(clean_text(str(error))) from None
        except Cancelled:
            raise EvalCancelled("cancelled") from None
        finally:
            self._let_go()

    def _candidate_cache_burst(self) -> bool:
        launched = getattr(self.candidate_peer, "launched", None)
        return launched is not None and launched.cache_over_quota()

    def _start(self, gate) -> None:
        keeper, spares, settings = self.keeper, self.spares, self.settings
        self.reference_peer = keeper.take(self.key, settings) if keeper is not None else None
        # A spare serves only a source with no cache yet: its cache then takes the source's name.
        if spares is not None and not self.own_cache.exists():
            self.candidate_peer = spares.take(self.spare_key, settings)
        fresh: list[Peer] = []
        try:
            if self.reference_peer is None:
                self.reference_peer = (
                    keeper.start(settings)
                    if keeper is not None
                    else start_worker("reference", settings, None)
                )
                fresh.append(self.reference_peer)
            if self.candidate_peer is None:
                self.candidate_peer = start_worker("candidate", settings, self.own_cache.resolve())
                fresh.append(self.candidate_peer)
            else:
                link_cache(self.own_cache, self.candidate_peer)
        except JailUnavailable as error:
            raise EvalError(str(error)) from None
        for peer in (self.reference_peer, self.candidate_peer):
            gate.started(peer.process.pid)
        # Fresh workers start their device and thread pools at once (CUDA start-up is seconds).
        if fresh:
            with ThreadPoolExecutor(len(fresh), thread_name_prefix="kernel-agent-hello") as pool:
                list(pool.map(lambda peer: say_hello(peer, settings), fresh))
        if spares is not None:  # the next candidate's worker boots during this one's build
            self.booting = spares.start(
                settings, self.own_cache.parent, getattr(gate, "spare_started", gate.started)
            )

    def _let_go(self) -> None:
        if self.reference_peer is not None and self.keeper is not None and self.judged:
            self.keeper.give(self.key, self.reference_peer)  # closed there unless all answered
        elif self.reference_peer is not None:
            self.reference_peer.close()
        if self.candidate_peer is not None:
            self.candidate_peer.close()
        if self.booting is not None and self.spares is not None:
            self.booting.settle(self.spares, self.spare_key, keep=self.judged)
        sweep_caches(self.own_cache.parent)  # every source's cache: the root stays under its cap


def _judge_request(
    reference: SourceFile, candidate: SourceFile, options: EvalOptions, seed: int
) -> JudgeRequest:
    from agents.verify.clock import ClockConfig
    from agents.verify.judge import JudgeRequest

    return JudgeRequest(
        reference=reference,
        candidate=candidate,
        device=options.device,
        size=options.size,
        trials=options.trials,
        seed=seed,
        measure=options.measure,
        clock=ClockConfig(
            min_runs=options.timing_min_runs,
            max_runs=options.timing_max_runs,
            budget_s=options.timing_budget_s,
            cuda_graph=options.cuda_graph,
        ),
        build_timeout_s=options.limits.build_timeout_s,
        run_timeout_s=options.limits.run_timeout_s,
    )


def _final_verdict(findings, options: EvalOptions, *, over_quota: bool, **context) -> EvalResult:
    """The judge's findings as the EvalResult, with the rules judged after the run: the
    cache quota and, when asked, a state_dict that loads as it is."""
    if over_quota:
        findings.verdict = Verdict.REJECTED
        findings.reasons.append(
            "its build and compiler cache grew past its quota "
            f"({options.limits.cache_bytes / 1024**3:g} GiB or "
            f"{options.limits.cache_files:,} files); the cache was emptied"
        )
    result = EvalResult(**{f.name: getattr(findings, f.name) for f in fields(findings)}, **context)
    result.reasons = [clean_text(reason) for reason in result.reasons]
    result.timing_notes = [clean_text(note) for note in result.timing_notes]
    if result.correct and options.require_state_dict and not result.state_dict_compatible:
        result.verdict = Verdict.REJECTED
        result.reasons.append(
            "ModelNew does not accept Model's state_dict as it is (keys or shapes differ), "
            "so it is not a drop-in replacement"
        )
    return result


def evaluate_request(
    request: EvaluateRequest,
    cancel: threading.Event | None = None,
    on_phase: PhaseCallback | None = None,
) -> EvalResult:
    """`evaluate` for a typed request (`kernel-agent eval`'s)."""
    options = EvalOptions(
        device=request.device,
        size=request.size,
        trials=request.trials,
        seed=request.seed,
        threads=request.threads,
        measure=request.timing,
        timing_budget_s=request.timing_budget,
        cuda_graph=request.cuda_graph,
        require_state_dict=request.require_state_dict,
        jail=request.jail,
        limits=Limits(build_timeout_s=request.build_timeout, run_timeout_s=request.run_timeout),
    )
    return evaluate(request.reference, request.candidate, options, cancel, on_phase=on_phase)


def _raise_if_cancelled(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise EvalCancelled("cancelled")


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far (VmHWM); 0 where /proc does not say."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise EvalError("--device cuda: no CUDA device is available here; use --device cpu")
