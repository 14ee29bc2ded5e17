"""The `kernel-agent` command line.

Exit status: 0 when the candidate is correct, 1 for any other verdict, 2 for a usage error
(always one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from agents import __version__
from agents.bench.command import add_bench_parser, run_bench_command
from agents.evaluate import DEVICES, MIN_TRIALS, EvalError, EvalOptions, evaluate
from agents.memory_command import MemoryCommandError, add_memory_parser, run_memory
from agents.optimize_command import add_optimize_parser, run_optimize
from agents.profile.api import ProfileError
from agents.profile.command import add_profile_parser, run_profile
from agents.sandbox.process import Limits
from agents.skills_command import SkillCommandError, add_skills_parser, run_skills
from agents.task import SIZES, SourceFile, TaskLoadError
from agents.verify.verdict import EvalResult
from server.serve import ServeUsageError, add_serve_parser, run_serve

EXIT_CORRECT, EXIT_NOT_CORRECT, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A bad command line; reported in one line with exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kernel-agent", description="Verified kernel optimisation.")
    parser.add_argument("--version", action="version", version=f"kernel-agent {__version__}")
    commands = parser.add_subparsers(dest="command", parser_class=_Parser)
    ev = commands.add_parser(
        "eval",
        help="verify a candidate (ModelNew) against a KernelBench problem (Model) and time it",
        description="Verify CANDIDATE's ModelNew against REFERENCE's Model in a sandbox, "
        "then time both.",
    )
    ev.add_argument("reference", metavar="REFERENCE.py")
    ev.add_argument("candidate", metavar="CANDIDATE.py")
    ev.add_argument("--device", choices=DEVICES, default="cpu")
    ev.add_argument(
        "--size", choices=SIZES, default="default", help="gpu: apply the problem's GPU_SIZES"
    )
    ev.add_argument(
        "--trials", type=int, default=MIN_TRIALS, help="correctness trials (at least 5)"
    )
    ev.add_argument("--seed", type=int, default=None, help="base seed (default: random)")
    ev.add_argument("--threads", type=int, default=None, help="CPU threads (default: all)")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    ev.add_argument("--no-timing", action="store_true", help="verify only")
    ev.add_argument(
        "--timing-budget",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="stop timing after this long even if the medians are not yet stable",
    )
    ev.add_argument(
        "--cuda-graph", action="store_true", help="time CUDA graph replays (launch-bound kernels)"
    )
    ev.add_argument("--build-timeout", type=float, default=600.0, metavar="SECONDS")
    ev.add_argument("--run-timeout", type=float, default=300.0, metavar="SECONDS")
    ev.add_argument(
        "--require-state-dict",
        action="store_true",
        help="refuse a ModelNew that does not accept Model's state_dict as it is",
    )
    ev.add_argument(
        "--no-jail", action="store_true", help="skip the bubblewrap jail (limits still apply)"
    )
    add_optimize_parser(commands)
    add_bench_parser(commands)
    add_profile_parser(commands)
    add_skills_parser(commands)
    add_memory_parser(commands)
    add_serve_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.command == "eval":
            return run_eval(args)
        if args.command == "memory":
            return run_memory(args)
        if args.command == "skills":
            return run_skills(args)
        if args.command == "profile":
            return run_profile(args)
        if args.command == "optimize":
            return run_optimize(args)
        if args.command == "bench":
            return run_bench_command(args, list(argv if argv is not None else sys.argv[1:]))
        if args.command == "serve":
            return run_serve(args)
        build_parser().print_help()
        return EXIT_USAGE
    except (
        UsageError,
        EvalError,
        TaskLoadError,
        ProfileError,
        SkillCommandError,
        MemoryCommandError,
        ServeUsageError,
    ) as error:
        print(f"kernel-agent: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kernel-agent: interrupted", file=sys.stderr)
        return 130


def run_eval(args: argparse.Namespace) -> int:
    if args.trials < MIN_TRIALS:
        raise UsageError(f"--trials must be at least {MIN_TRIALS} (KernelBench's minimum)")
    if args.build_timeout <= 0 or args.run_timeout <= 0:
        raise UsageError("timeouts must be positive")
    reference = SourceFile.from_path(args.reference)
    candidate = SourceFile.from_path(args.candidate)
    options = EvalOptions(
        device=args.device,
        size=args.size,
        trials=args.trials,
        seed=args.seed,
        threads=args.threads,
        measure=not args.no_timing,
        timing_budget_s=args.timing_budget,
        cuda_graph=args.cuda_graph,
        require_state_dict=args.require_state_dict,
        jail=not args.no_jail,
        limits=Limits(build_timeout_s=args.build_timeout, run_timeout_s=args.run_timeout),
    )
    result = evaluate(reference, candidate, options)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(format_summary(result))
    return EXIT_CORRECT if result.correct else EXIT_NOT_CORRECT


def _rule(value: bool | None) -> str:
    return "n/a" if value is None else ("pass" if value else "fail")


def format_summary(result: EvalResult) -> str:
    lines = [f"verdict: {result.verdict.value}"]
    lines += [f"  reason: {reason}" for reason in result.reasons]
    if result.trials:
        ratio = (
            f" (error {result.float64_error_ratio:.2f}x of the allowed band)"
            if result.float64_error_ratio is not None
            else ""
        )
        lines.append(
            f"  correctness: {result.trials} trials on {result.device}; "
            f"strict allclose {_rule(result.strict_allclose)}; "
            f"float64 rule {_rule(result.float64_rule)}{ratio}"
        )
    if result.state_dict_compatible is not None:
        compatible = "compatible" if result.state_dict_compatible else "NOT compatible"
        lines.append(
            f"  state_dict: {compatible}; reload check: {result.reload_check or 'not run'}"
        )
    if result.speedup is not None:
        interval = ""
        if result.speedup_ci:
            interval = f" [95% CI {result.speedup_ci[0]:.2f}-{result.speedup_ci[1]:.2f}]"
        lines.append(
            f"  timing: reference {result.reference_ms:.3f} ms "
            f"(IQR {result.reference_iqr_ms or 0:.3f}), candidate {result.candidate_ms:.3f} ms "
            f"(IQR {result.candidate_iqr_ms or 0:.3f}), speedup {result.speedup:.2f}x{interval}"
        )
        lines.append(f"    medians of {result.timing_runs} runs; {result.timing_method}")
        lines += [f"    note: {note}" for note in result.timing_notes]
    if result.isolation:
        lines.append(f"  isolation: {result.isolation}")
    lines.append(f"  took {result.elapsed_s:.1f} s{_phase_breakdown(result.phase_s)}")
    return "\n".join(lines)


_PHASES = (
    ("start", "start-up"),
    ("build", "imports and build"),
    ("run", "correctness"),
    ("lane_wait", "waiting for the device"),
    ("measure", "timing"),
)


def _phase_breakdown(phase_s: dict[str, float]) -> str:
    """Where an evaluation's wall time went, e.g. " (imports and build 0.9 s, correctness
    1.4 s, timing 0.4 s)"; phases under 0.05 s are left out, except build and run."""
    parts = [
        f"{label} {phase_s[name]:.1f} s"
        for name, label in _PHASES
        if phase_s.get(name, 0.0) >= 0.05 or name in ("build", "run")
    ]
    if phase_s.get("paused"):
        parts.append(f"of which stopped for other timings {phase_s['paused']:.1f} s")
    return f" ({', '.join(parts)})" if parts else ""
