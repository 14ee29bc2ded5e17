"""The `kernel-agent` command line.

Exit status: 0 when the candidate is correct, 1 for any other verdict, 2 for a usage error
(always one line on stderr, never a traceback).

Start-up: only the standard library is imported here. A subcommand's module (and torch, numpy,
rich behind it) is imported only when that subcommand runs or prints its own help, so
`kernel-agent --help` and a mistyped command answer at once.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents import __version__

if TYPE_CHECKING:
    from agents.verify.verdict import EvalResult

EXIT_CORRECT, EXIT_NOT_CORRECT, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A bad command line; reported in one line with exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise UsageError(f"{message} (see `{self.prog} --help`)")


@dataclass(frozen=True)
class Command:
    """A subcommand: its line in `kernel-agent --help`, and where its parser and runner live
    (imported only when the subcommand is used)."""

    name: str
    summary: str
    module: str
    add: str
    run: str

    def load(self, attribute: str) -> Callable[..., Any]:
        return getattr(importlib.import_module(self.module), attribute)


COMMANDS = (
    Command(
        "eval",
        "verify a candidate (ModelNew) against a KernelBench problem (Model) and time it",
        "agents.cli",
        "add_eval_parser",
        "run_eval",
    ),
    Command(
        "optimize",
        "search for a faster, verified ModelNew for a KernelBench-format file",
        "agents.optimize_command",
        "add_optimize_parser",
        "run_optimize",
    ),
    Command(
        "bench",
        "time eager and a baseline (torch.compile, or eager itself) over a suite",
        "agents.bench.command",
        "add_bench_parser",
        "run_bench_command",
    ),
    Command(
        "profile",
        "show where a KernelBench problem's forward spends its time, line by line",
        "agents.profile.command",
        "add_profile_parser",
        "run_profile",
    ),
    Command(
        "skills",
        "the expert skill library: list, show, and match against a kernel",
        "agents.skills_command",
        "add_skills_parser",
        "run_skills",
    ),
    Command(
        "memory",
        "the optimization memory: list, show, export, import, forget, stats",
        "agents.memory_command",
        "add_memory_parser",
        "run_memory",
    ),
    Command(
        "serve",
        "run the language server (LSP over stdio, or TCP with --tcp HOST:PORT)",
        "server.serve",
        "add_serve_parser",
        "run_serve",
    ),
)
_BY_NAME = {command.name: command for command in COMMANDS}

_USAGE_ERRORS = (
    ("agents.evaluate", "EvalError"),
    ("agents.task", "TaskLoadError"),
    ("agents.profile.api", "ProfileError"),
    ("agents.skills_command", "SkillCommandError"),
    ("agents.memory_command", "MemoryCommandError"),
    ("server.serve", "ServeUsageError"),
)
"""Exceptions that mean a bad request (one line, exit status 2), by module: a class can only
be raised once its module is loaded, so none of these modules is imported to check."""


def build_parser(only: str | None = None, *, lazy: bool = False) -> argparse.ArgumentParser:
    """The whole command line. `lazy`: only the subcommand `only` (if any) is built in full,
    the others are listed by name and summary alone and nothing of theirs is imported."""
    parser = _Parser(prog="kernel-agent", description="Verified kernel optimisation.")
    parser.add_argument("--version", action="version", version=f"kernel-agent {__version__}")
    commands = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    for command in COMMANDS:
        if not lazy or command.name == only:
            command.load(command.add)(commands)
        else:
            commands.add_parser(command.name, help=command.summary, add_help=False)
    return parser


def _command_word(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option:
    the top level's options take no value), if it is one we know."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in _BY_NAME else None
    return None


def _is_usage_error(error: BaseException) -> bool:
    if isinstance(error, UsageError):
        return True
    for module_name, class_name in _USAGE_ERRORS:
        module = sys.modules.get(module_name)
        if module is not None and isinstance(error, getattr(module, class_name)):
            return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    words = list(argv if argv is not None else sys.argv[1:])
    try:
        parser = build_parser(_command_word(words), lazy=True)
        args = parser.parse_args(words)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        command = _BY_NAME[args.command]
        if command.name == "bench":
            return command.load(command.run)(args, words)
        return command.load(command.run)(args)
    except KeyboardInterrupt:
        print("kernel-agent: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if not _is_usage_error(error):
            raise
        print(f"kernel-agent: error: {error}", file=sys.stderr)
        return EXIT_USAGE


# -- kernel-agent eval ---------------------------------------------------------------------------


def add_eval_parser(commands: Any) -> argparse.ArgumentParser:
    from agents.evaluate import DEVICES, MIN_TRIALS
    from agents.task import SIZES

    ev = commands.add_parser(
        "eval",
        help=_BY_NAME["eval"].summary,
        description="Verify CANDIDATE's ModelNew against REFERENCE's Model in a sandbox, "
        "then time both.",
    )
    ev.add_argument("reference", metavar="REFERENCE.py", help="the problem: Model, get_inputs, ...")
    ev.add_argument("candidate", metavar="CANDIDATE.py", help="the kernel to judge: ModelNew")
    ev.add_argument(
        "--device", choices=DEVICES, default="cpu", help="where both run (default: cpu)"
    )
    ev.add_argument(
        "--size", choices=SIZES, default="default", help="gpu: apply the problem's GPU_SIZES"
    )
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
    ev.add_argument("--no-timing", action="store_true", help="verify only")
    ev.add_argument(
        "--timing-budget",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="stop timing after this long even if the medians are not yet stable (default: 3)",
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
        "--no-jail", action="store_true", help="skip the bubblewrap jail (limits still apply)"
    )
    return ev


def run_eval(args: argparse.Namespace) -> int:
    from agents.evaluate import MIN_TRIALS, EvalOptions, evaluate
    from agents.sandbox.process import Limits
    from agents.task import SourceFile

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
        lines.append(f"  isolation: {result.isolation}")
    lines.append(f"  took {result.elapsed_s:.1f} s{_phase_breakdown(result.phase_s)}")
    return "\n".join(lines)


_PHASES = (
    ("start", "start-up and the reference"),
    ("build", "candidate imports and build"),
    ("run", "correctness"),
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
