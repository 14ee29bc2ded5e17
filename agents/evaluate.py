"""`evaluate`: the one function that judges a candidate against a reference.

The CLI, the search and the language server all call it. It parses both files (never runs
them here), applies the static checker, then runs the review in a sandboxed child and turns
whatever came back, or did not, into an `EvalResult`.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from agents.sandbox.devicelock import DeviceGate
from agents.sandbox.process import ChildOutcome, Limits, MeasureGate, run_child
from agents.task import SIZES, SourceFile, TaskLoadError, outline_candidate, outline_problem
from agents.verify.static_check import check_candidate, uses_low_precision
from agents.verify.verdict import EvalResult, Verdict

DEVICES = ("cpu", "cuda")
MIN_TRIALS = 5
"""KernelBench's current number of correctness trials; we never run fewer."""


class EvalError(Exception):
    """The request itself is wrong (bad reference, unknown device): a usage error."""


class EvalCancelled(Exception):
    """The caller's cancel event was set; the child was killed and no verdict exists."""


@dataclass(frozen=True)
class EvalOptions:
    """How to judge: device, trials, seeds, limits, and what to require."""

    device: str = "cpu"
    size: str = "default"
    trials: int = 5
    seed: int | None = None  # None: a fresh random seed, so no candidate can predict inputs
    threads: int | None = None
    measure: bool = True
    timing_budget_s: float = 5.0
    timing_min_runs: int = 10
    timing_max_runs: int = 200
    cuda_graph: bool = False
    require_state_dict: bool = False
    jail: bool = True
    static_check: bool = True  # off only in tests that prove the runtime checks on their own
    limits: Limits = field(default_factory=Limits)
    cache_dir: Path | None = None


def default_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cache_dir(options: EvalOptions) -> Path:
    return options.cache_dir or Path(platformdirs.user_cache_dir("kernel-agent"))


def evaluate(
    reference: SourceFile,
    candidate: SourceFile,
    options: EvalOptions,
    cancel: threading.Event | None = None,
    gate: MeasureGate | None = None,
) -> EvalResult:
    """Judge `candidate` against `reference`. Raises EvalError only for a bad request, and
    EvalCancelled when `cancel` is set before a verdict arrives. `gate` (see
    `agents.evalpool`) decides when the child may start timing; without one, the child times
    only while it holds its device's machine-wide lock (`DeviceGate`)."""
    if options.device not in DEVICES:
        raise EvalError(f"unknown device {options.device!r}: use one of {', '.join(DEVICES)}")
    if options.size not in SIZES:
        raise EvalError(f"unknown size {options.size!r}: use one of {', '.join(SIZES)}")
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

    findings = []
    if options.static_check:
        findings = check_candidate(
            candidate.text, reference_is_fp32=not uses_low_precision(reference.text)
        )
    if findings:
        return EvalResult(
            Verdict.REJECTED,
            [f"{candidate.label}:{f.line}: {f.message} [{f.rule}]" for f in findings],
            device=options.device,
            isolation="static check only: the candidate was never run",
            static_findings=[
                {"rule": f.rule, "line": f.line, "message": f.message} for f in findings
            ],
        )

    threads = options.threads or default_threads()
    seed = options.seed if options.seed is not None else secrets.randbelow(2**31 - 10_000)
    source_hash = hashlib.sha256(candidate.text.encode()).hexdigest()[:16]
    request = {
        "reference": {"text": reference.text, "path": reference.path},
        "candidate": {"text": candidate.text, "path": candidate.path},
        "device": options.device,
        "size": options.size,
        "trials": options.trials,
        "seed": seed,
        "threads": threads,
        "measure": options.measure,
        "timing_budget_s": options.timing_budget_s,
        "timing_min_runs": options.timing_min_runs,
        "timing_max_runs": options.timing_max_runs,
        "cuda_graph": options.cuda_graph,
    }
    outcome = run_child(
        request,
        device=options.device,
        threads=threads,
        build_cache=cache_dir(options) / "build" / source_hash,
        compiler_cache=cache_dir(options) / "compiler",
        limits=options.limits,
        use_jail=options.jail,
        cancel=cancel,
        gate=gate or DeviceGate(options.device),
    )
    # A caller that cancelled gets no verdict, even when the child ended in the same instant
    # (a killed child's closed streams would otherwise read as a crash).
    if outcome.cancelled or (cancel is not None and cancel.is_set()):
        raise EvalCancelled("cancelled")
    result = judge(outcome, options)
    result.seed = seed
    return result


def _require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise EvalError("--device cuda: no CUDA device is available here; use --device cpu")


def judge(outcome: ChildOutcome, options: EvalOptions) -> EvalResult:
    """Turn a child's outcome into a verdict; silence, crashes and garbage all count."""
    base = {
        "device": options.device,
        "isolation": outcome.isolation,
        "elapsed_s": round(outcome.elapsed_s, 3),
        "phase_s": {name: round(seconds, 3) for name, seconds in outcome.phase_s.items()},
    }
    message = outcome.result
    if message is not None:
        report = dict(message.get("report") or {})
        if report.pop("reference_failed", False):
            raise EvalError("; ".join(report.get("reasons") or ["the reference failed"]))
        try:
            verdict = Verdict(report.pop("verdict"))
            result = EvalResult(verdict=verdict, **report, **base)
        except (KeyError, TypeError, ValueError):
            return EvalResult(Verdict.RUNTIME_ERROR, ["the child sent a malformed result"], **base)
        if result.correct and options.require_state_dict and not result.state_dict_compatible:
            result.verdict = Verdict.REJECTED
            result.reasons.append(
                "ModelNew does not accept Model's state_dict as it is (keys or shapes differ), "
                "so it is not a drop-in replacement"
            )
        if outcome.garbage_lines:
            result.verdict = Verdict.REJECTED
            result.reasons.append(
                f"candidate wrote {outcome.garbage_lines} line(s) of garbage to the verifier's "
                "result channel"
            )
        return result
    if outcome.phase == "start" and not outcome.messages and not outcome.timed_out_phase:
        # No user code had run yet: the sandbox itself is broken, not the candidate.
        last = _last_line(outcome.stderr_tail) or f"exit status {outcome.returncode}"
        raise EvalError(f"the sandbox failed to start ({last}); try --no-jail to compare")
    return EvalResult(_silent_verdict(outcome), _silent_reasons(outcome, options), **base)


def _silent_verdict(outcome: ChildOutcome) -> Verdict:
    if outcome.timed_out_phase:
        return Verdict.TIMEOUT
    if outcome.phase in ("start", "build"):
        return Verdict.COMPILE_ERROR if outcome.returncode == 0 else Verdict.RUNTIME_ERROR
    return Verdict.RUNTIME_ERROR


def _silent_reasons(outcome: ChildOutcome, options: EvalOptions) -> list[str]:
    if outcome.timed_out_phase == "build":
        reasons = [f"building took longer than {options.limits.build_timeout_s:g} s"]
    elif outcome.timed_out_phase:
        reasons = [f"running took longer than {options.limits.run_timeout_s:g} s"]
    else:
        code = outcome.returncode
        name = outcome.signal_name
        if name is None and code is not None and code > 128:  # bubblewrap reports 128 + signal
            name = ChildOutcome(returncode=128 - code).signal_name
        if name:
            cause = " (out of memory?)" if name == "SIGKILL" else ""
            reasons = [
                f"the candidate's process was killed by {name}{cause} during {outcome.phase}"
            ]
        else:
            reasons = [
                f"the candidate's process exited with status {code} during {outcome.phase} "
                "without reporting a verdict (os._exit or sys.exit in candidate code?)"
            ]
    last = _last_line(outcome.stderr_tail)
    if last:
        reasons.append(f"last line on stderr: {last}")
    if outcome.garbage_lines:
        reasons.append(f"{outcome.garbage_lines} line(s) of garbage on the result channel")
    return reasons


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
