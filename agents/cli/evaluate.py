"""`kernel-agent eval REFERENCE.py CANDIDATE.py`: verify a candidate, time it, print the verdict.

Exit status: 0 when the candidate is correct, 1 for any other verdict, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import TYPE_CHECKING, Any

from agents.cli import EXIT_CORRECT, EXIT_NOT_CORRECT
from agents.request.defaults import DEVICES, EVAL_TIMING_BUDGET_S, MIN_TRIALS
from agents.task import SIZE_HELP, SIZES

if TYPE_CHECKING:
    from agents.verify.verdict import EvalResult

SUMMARY = "verify a candidate (ModelNew) against a KernelBench problem (Model) and time it"


def add_eval_parser(commands: Any) -> argparse.ArgumentParser:
    ev = commands.add_parser(
        "eval",
        help=SUMMARY,
        description="Verify CANDIDATE's ModelNew against REFERENCE's Model in a sandbox, "
        "then time both.",
    )
    ev.add_argument(
        "reference",
        metavar="REFERENCE.py[::NAME]",
        help="the problem: Model, get_inputs, ...; or NAME in it (a function, a Triton "
        "launcher: ModelNew.forward takes its arguments)",
    )
    ev.add_argument("candidate", metavar="CANDIDATE.py", help="the kernel to judge: ModelNew")
    ev.add_argument(
        "--device", choices=DEVICES, default="cpu", help="where both run (default: cpu)"
    )
    ev.add_argument("--size", choices=SIZES, default="default", help=SIZE_HELP)
    ev.add_argument(
        "--trials",
        type=int,
        default=MIN_TRIALS,
        help=f"correctness trials (at least {MIN_TRIALS})",
    )
    ev.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the init (get_init_inputs and Model's weights), to rebuild the same model "
        "(default: random); every trial's inputs come from fresh system randomness, never from it",
    )
    ev.add_argument("--threads", type=int, default=None, help="CPU threads (default: all)")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    ev.add_argument("--no-timing", dest="timing", action="store_false", help="verify only")
    ev.add_argument(
        "--timing-budget",
        type=float,
        default=EVAL_TIMING_BUDGET_S,
        metavar="SECONDS",
        help="stop timing after this long even if the medians are not yet stable "
        f"(default: {EVAL_TIMING_BUDGET_S:g})",
    )
    ev.add_argument(
        "--cuda-graph", action="store_true", help="time CUDA graph replays (launch-bound kernels)"
    )
    ev.add_argument(
        "--build-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="verdict timeout if importing and building take longer (default 600)",
    )
    ev.add_argument(
        "--run-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="verdict timeout if the correctness trials take longer (default 300)",
    )
    ev.add_argument(
        "--require-state-dict",
        action="store_true",
        help="refuse a ModelNew that does not accept Model's state_dict as it is",
    )
    ev.add_argument(
        "--no-jail",
        dest="jail",
        action="store_false",
        help="skip the bubblewrap jail (limits still apply)",
    )
    return ev


_REQUEST_FIELDS = (
    "device",
    "size",
    "trials",
    "seed",
    "threads",
    "timing",
    "timing_budget",
    "cuda_graph",
    "require_state_dict",
    "jail",
    "build_timeout",
    "run_timeout",
)


def run_eval(args: argparse.Namespace) -> int:
    from agents.evaluate import evaluate_request
    from agents.request.requests import EvaluateRequest
    from agents.sizing.api import resolve_size
    from agents.targets.load import SEPARATOR, load_target
    from agents.task import SourceFile

    named = SEPARATOR in args.reference  # a target in a file: its synthesised problem
    reference = (
        load_target(args.reference).problem if named else SourceFile.from_path(args.reference)
    )
    candidate = SourceFile.from_path(args.candidate)
    plan = resolve_size(
        reference, args.size, device=args.device, threads=args.threads or 1, use_jail=args.jail
    )
    fields = {name: getattr(args, name) for name in _REQUEST_FIELDS} | {"size": plan.size}
    request = EvaluateRequest(reference=reference, candidate=candidate, **fields)
    if plan.line():  # on stderr, as optimize says it; the JSON has `sizes`
        print(plan.line(), file=sys.stderr)
    result = evaluate_request(request)
    if args.json:
        fitted = {"sizes": plan.to_json()} if plan.line() else {}
        print(json.dumps(result.to_json() | fitted, indent=2))
    else:
        print(format_summary(result))
    return EXIT_CORRECT if result.correct else EXIT_NOT_CORRECT


def _rule(value: bool | None) -> str:
    return "n/a" if value is None else ("pass" if value else "fail")


def format_summary(result: EvalResult) -> str:
    """The readable report of one evaluation, for every verdict (only fields it has)."""
    from agents.display import format_ms, plural

    lines = [f"verdict: {result.verdict.value}"]
    lines += [f"  reason: {reason}" for reason in result.reasons]
    if result.trials:
        ratio = (
            f" (error {result.float64_error_ratio:.2f}x of the allowed band)"
            if result.float64_error_ratio is not None
            else ""
        )
        lines.append(
            f"  correctness: {plural(result.trials, 'trial')} on {result.device}; "
            f"strict allclose {_rule(result.strict_allclose)}; "
            f"float64 rule {_rule(result.float64_rule)}{ratio}"
        )
    if result.state_dict_compatible is not None:
        compatible = "compatible" if result.state_dict_compatible else "NOT compatible"
        lines.append(
            f"  state_dict: {compatible}; reload check: {result.reload_check or 'not run'}"
        )
    if result.speedup is not None and result.reference_ms and result.candidate_ms:
        interval = ""
        if result.speedup_ci:
            interval = f" [95% CI {result.speedup_ci[0]:.2f}-{result.speedup_ci[1]:.2f}]"
        speedup = f"speedup {result.speedup:.2f}x{interval}"
        if not result.timing_stable:  # a ratio the load set is not a number to quote
            speedup = f"speedup: unstable ({result.timing_unstable_reason})"
        lines.append(
            f"  timing: reference {format_ms(result.reference_ms)} ms "
            f"(IQR {format_ms(result.reference_iqr_ms or 0.0)}), "
            f"candidate {format_ms(result.candidate_ms)} ms "
            f"(IQR {format_ms(result.candidate_iqr_ms or 0.0)}), "
            f"{speedup}"
        )
        lines.append(
            f"    speedup = reference median / candidate median, over "
            f"{plural(result.timing_runs, 'run')}; {result.timing_method}"
        )
        lines += [f"    note: {note}" for note in result.timing_notes]
    if result.isolation:
        lines.append(f"  isolation: {short_isolation(result.isolation)}")
    lines.append(f"  took {result.elapsed_s:.1f} s{_phase_breakdown(result.phase_s)}")
    return "\n".join(lines)


SHORT_ISOLATION = 90
"""The longest isolation line the human output shows (the whole text, about 300 characters on
every eval, stays in --json)."""


def short_isolation(full: str) -> str:
    """The isolation text agents/sandbox/launch.py writes, in the few words a reader checks
    on every eval: which jail, the network, the system-call filter, memory and the wall clocks,
    e.g. "jail (bubblewrap), no network, seccomp, 18 GiB address space, 600 s build / 300 s
    run". A text it does not know is shown whole, or cut, when short enough."""
    if full.startswith("bubblewrap jail"):
        parts = ["jail (bubblewrap)", "no network"]
    elif full.startswith("no jail"):
        parts = ["NO jail (--no-jail)"]
    else:
        return full if len(full) <= SHORT_ISOLATION else full[: SHORT_ISOLATION - 1] + "…"
    parts.append("NO seccomp" if "NO seccomp filter" in full else "seccomp")
    if memory := re.search(r"(\d+) GiB address space", full):
        parts.append(f"{memory[1]} GiB address space")
    if clocks := re.search(r"([\d.]+) s build / ([\d.]+) s run", full):
        parts.append(f"{clocks[1]} s build / {clocks[2]} s run")
    return ", ".join(parts)


_PHASES = (
    ("start", "start-up and the reference"),
    ("build", "candidate imports and build"),
    ("run", "correctness"),
    ("anchor", "float64 anchor"),
    ("compare", "comparing outputs"),
    ("lane_wait", "waiting for the device"),
    ("measure", "timing"),
)


def _phase_breakdown(phase_s: dict[str, float]) -> str:
    """Where an evaluation's wall time went, e.g. " (start-up and the reference 2.1 s,
    candidate imports and build 0.0 s, correctness 1.4 s, timing 0.4 s)"; phases under
    0.05 s are left out, except build and run once they began; a refusal before any worker
    started has no breakdown. Every phase is optional: a verdict reached early (a timeout while
    building, a refusal) shows only the phases it went through."""
    parts = [
        f"{label} {phase_s.get(name, 0.0):.1f} s"
        for name, label in _PHASES
        if phase_s.get(name, 0.0) >= 0.05 or (name in phase_s and name in ("build", "run"))
    ]
    if phase_s.get("paused"):
        parts.append(f"of which stopped for other timings {phase_s['paused']:.1f} s")
    return f" ({', '.join(parts)})" if parts else ""
