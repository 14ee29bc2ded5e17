"""Parent side of `profile`: check the file, measure ceilings, run the sandboxed child.

The parent never imports the problem; it parses it (so a malformed file fails fast with one
line and no child), measures the machine's ceilings itself (the jail cannot write their
cache), and turns whatever the child said, or did not say, into a Profile or a ProfileError.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import platformdirs

from agents.profile.report import Profile
from agents.request.defaults import DEVICES, PROFILE_REPEAT
from agents.request.requests import ProfileRequest
from agents.sandbox.process import ChildOutcome, Limits, run_child
from agents.task import SourceFile, TaskLoadError, check_size, outline_problem


class ProfileError(Exception):
    """Profiling could not give an answer; the message is one line for the user."""


class ProblemFailed(ProfileError):
    """The problem's own code raised (loading it, its inputs or its forward): no profiler,
    timeout or sandbox trouble, so any run of it would fail the same way."""


class ProblemTooLarge(ProblemFailed):
    """The problem cannot fit this machine at these sizes (agents/sizing/check.py): any run
    of it would fail, so a search stops at once with the one-line refusal."""


RAISE_HINT = "raise it with --max-time"


def profile_file(
    source: SourceFile,
    *,
    device: str = "cpu",
    size: str = "default",
    threads: int | None = None,
    repeat: int = PROFILE_REPEAT,
    use_jail: bool = True,
    cache_dir: Path | None = None,
    limits: Limits | None = None,
    refresh_ceilings: bool = False,
    cancel: threading.Event | None = None,
) -> Profile:
    """Profile a KernelBench problem's `Model.forward` line by line, in the sandbox."""
    _check_request(source, device, size, repeat, threads)
    from agents.profile.ceilings import get_ceilings  # torch: imported only when profiling

    size = _fitted(source, size, device, use_jail, cancel)

    threads = threads or _default_threads()
    cache = Path(cache_dir or platformdirs.user_cache_dir("kernel-agent"))
    ceilings = get_ceilings(device, threads, refresh=refresh_ceilings, cache_dir=cache)
    limits = limits or Limits()
    request = {
        "reference": {"text": source.text, "path": source.path},
        "device": device,
        "threads": threads,
        "size": size,
        "repeat": repeat,
        "cache_dir": str(cache),
        "ceilings": ceilings.to_json(),
    }
    outcome = run_child(
        request,
        device=device,
        threads=threads,
        build_cache=cache / "build" / "profile",
        compiler_cache=cache / "compiler",
        limits=limits,
        entry="agents.profile.child",
        use_jail=use_jail,
        cancel=cancel,
    )
    if outcome.cancelled:
        raise ProfileError("profiling was cancelled")
    return read_outcome(outcome, source, limits)


def profile_request(
    request: ProfileRequest,
    cancel: threading.Event | None = None,
    *,
    max_time: float | None = None,
) -> Profile:
    """`profile_file` for a typed request (`kernel-agent profile`'s, an editor job's);
    `max_time`: the longest the profiled forwards may run (default: the sandbox's 60 s)."""
    if max_time is not None and max_time <= 0:
        raise ProfileError("--max-time must be positive")
    limits = Limits(run_timeout_s=max_time) if max_time is not None else None
    return profile_file(
        request.problem,
        device=request.device,
        size=request.size,
        threads=request.threads,
        repeat=request.repeat,
        use_jail=request.jail,
        refresh_ceilings=request.refresh_ceilings,
        cancel=cancel,
        limits=limits,
    )


def _check_request(
    source: SourceFile, device: str, size: str, repeat: int, threads: int | None
) -> None:
    if device not in DEVICES:
        raise ProfileError(f"unknown device {device!r}: use one of {', '.join(DEVICES)}")
    try:
        check_size(size)
    except TaskLoadError as error:
        raise ProfileError(str(error)) from None
    if repeat < 1:
        raise ProfileError("--repeat must be at least 1")
    if threads is not None and threads < 1:
        raise ProfileError("--threads must be at least 1")
    try:
        outline_problem(source)
    except TaskLoadError as error:
        raise ProfileError(str(error)) from None
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ProfileError("--device cuda: no CUDA device is available here; use --device cpu")


def _fitted(
    source: SourceFile, size: str, device: str, use_jail: bool, cancel: threading.Event | None
) -> str:
    """`--size fit` resolved (`fit:batch_size=16`, which the profile names as its size)."""
    from agents.sizing.api import resolve_size

    try:
        return resolve_size(source, size, device=device, use_jail=use_jail, cancel=cancel).size
    except TaskLoadError as error:
        raise ProfileError(str(error)) from None


def _default_threads() -> int:
    """Every core this process may run on, as the verifier does."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def read_outcome(outcome: ChildOutcome, source: SourceFile, limits: Limits) -> Profile:
    """The child's Profile, or one line saying why there is none."""
    message = outcome.result
    if message is not None:
        if message.get("error"):
            text = _one_line(str(message["error"]))
            if message.get("too_large"):
                raise ProblemTooLarge(text)
            raise (ProblemFailed if _in_users_code(text, source) else ProfileError)(text)
        try:
            return Profile.from_json(message["profile"])
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ProfileError(f"{source.label}: the profiler sent a malformed result") from None
    if outcome.timed_out_phase == "build":
        raise ProfileError(
            f"{source.label}: loading took longer than {limits.build_timeout_s:g} s; {RAISE_HINT}"
        )
    if outcome.timed_out_phase:
        raise ProfileError(
            f"{source.label}: profiling took longer than {limits.run_timeout_s:g} s; {RAISE_HINT}"
        )
    last = _last_line(outcome.stderr_tail)
    if outcome.phase == "start" and not outcome.messages:
        cause = last or f"exit status {outcome.returncode}"
        raise ProfileError(f"the sandbox failed to start ({cause}); try --no-jail to compare")
    name = outcome.signal_name
    code = outcome.returncode
    if name is None and code is not None and code > 128:  # bubblewrap reports 128 + signal
        name = ChildOutcome(returncode=128 - code).signal_name
    how = f"was killed by {name}" if name else f"exited with status {code}"
    if name == "SIGKILL":
        how += " (out of memory?)"
    tail = f"; last line on stderr: {last}" if last else ""
    raise ProfileError(f"{source.label}: the profiler's process {how} during {outcome.phase}{tail}")


def _in_users_code(text: str, source: SourceFile) -> bool:
    """The child names the user's file and line first when the user's code raised."""
    head = text.removeprefix(f"{source.label}:")
    return head != text and head[:1].isdigit()


def _last_line(text: str) -> str:
    """The last line on stderr that is not the profiler's own chatter."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("USDT:")]
    return lines[-1][:300] if lines else ""


def _one_line(text: str) -> str:
    return " ".join(text.split())
