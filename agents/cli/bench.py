"""`kernel-agent bench`: time eager and torch.compile over a problem suite, or (--optimize)
run the offline search on every problem against both (agents/bench/ does the work)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from agents.bench.limits import BenchClock, check_budget
from agents.bench.render import markdown_report, plot_report, render_report
from agents.bench.report import BenchReport, merge_reports
from agents.bench.runner import BenchOptions, check_resumable, run_bench
from agents.bench.suite import BASELINES, discover
from agents.cli.bench_view import BenchView
from agents.cli.interrupt import Interrupts
from agents.cli.pool_arguments import add_pool_arguments
from agents.display import make_console
from agents.evaluate import EvalError, EvalOptions
from agents.request.defaults import BENCH_MAX_EVALS, DEVICES, EVAL_TIMING_BUDGET_S
from agents.task import SIZE_HELP, SIZES

if TYPE_CHECKING:
    from rich.console import Console


def add_bench_parser(commands) -> None:
    bench = commands.add_parser(
        "bench",
        help="time eager and a baseline (torch.compile, or eager itself) over a suite",
        description="Verify and time a baseline (torch.compile) against eager for every "
        "problem in PATH: our bench/problems, or a KernelBench checkout's level folders.",
    )
    bench.add_argument(
        "path",
        metavar="PATH",
        nargs="?",
        default="bench/problems",
        help="a problem, a folder of problems or a KernelBench checkout (default: %(default)s)",
    )
    _add_timing_arguments(bench)
    _add_report_arguments(bench)
    _add_optimize_arguments(bench)


def _add_timing_arguments(bench: argparse.ArgumentParser) -> None:
    """Which problems run where, and how each is judged."""
    bench.add_argument(
        "--device", choices=DEVICES, default="cpu", help="where to run and time (default: cpu)"
    )
    bench.add_argument(
        "--size",
        choices=SIZES,
        default="default",
        help=f"{SIZE_HELP} (default: default)",
    )
    bench.add_argument(
        "--baseline",
        choices=BASELINES,
        default="torch.compile",
        help="what is timed against eager (eager: an A/A check of the timing)",
    )
    bench.add_argument("--levels", default=None, help="KernelBench levels, e.g. 1,2")
    bench.add_argument("--start", type=int, default=0, help="skip the first N problems")
    bench.add_argument("--limit", type=int, default=None, help="run at most N problems")
    bench.add_argument(
        "--threads", type=int, default=None, help="CPU threads per side (default: all cores)"
    )
    bench.add_argument(
        "--timing-budget",
        type=float,
        default=EVAL_TIMING_BUDGET_S,
        metavar="SECONDS",
        help="timing time per problem before the medians must be stable "
        f"(default: {EVAL_TIMING_BUDGET_S:g})",
    )
    bench.add_argument(
        "--max-time",
        type=float,
        default=None,
        metavar="SECONDS",
        help="wall-clock budget of the whole run: what runs then is cut, the rest not run, "
        "and the report is written",
    )
    bench.add_argument(
        "--problem-time",
        type=float,
        default=None,
        metavar="SECONDS",
        help="wall-clock budget of each problem (baselines, search, head-to-head): a cut "
        "search keeps its best verified kernel",
    )
    bench.add_argument(
        "--no-jail",
        dest="jail",
        action="store_false",
        help="run candidates without the bubblewrap jail (only for code you trust)",
    )


def _add_report_arguments(bench: argparse.ArgumentParser) -> None:
    """What is printed and saved, and a saved run to resume or render."""
    bench.add_argument("--json", action="store_true", help="print the report as one JSON object")
    bench.add_argument(
        "--markdown", action="store_true", help="print a Markdown table for bench/RESULTS.md"
    )
    bench.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        default=None,
        metavar="RESULTS.json",
        help="render earlier reports instead of running; several parts of one run are merged",
    )
    bench.add_argument("--out", type=Path, default=None, help="also write the JSON report here")
    bench.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="RESULTS.json",
        help="continue the run saved there (and write it after every problem, unless --out "
        "names another file): problems with a result are kept, the rest (errors too) run",
    )
    bench.add_argument("--plot", type=Path, default=None, help="draw speedups to a PNG")


def _add_optimize_arguments(bench: argparse.ArgumentParser) -> None:
    """`--optimize`: the offline search on every problem, and its budget."""
    bench.add_argument(
        "--optimize",
        action="store_true",
        help="run the offline optimizer on every problem; compare with eager and torch.compile",
    )
    bench.add_argument(
        "--memory", type=Path, default=None, help="--optimize: memory file (default: fresh)"
    )
    bench.add_argument(
        "--max-evals",
        type=int,
        default=BENCH_MAX_EVALS,
        help=f"--optimize: per problem (default: {BENCH_MAX_EVALS})",
    )
    bench.add_argument(
        "--parallel-evals",
        type=int,
        default=1,
        help="--optimize: candidates built and checked at once (timings stay one per device)",
    )
    add_pool_arguments(bench)


def run_bench_command(args: argparse.Namespace, argv: list[str]) -> int:
    if args.from_json is not None:
        return _render_saved(args)
    try:
        levels = [int(x) for x in args.levels.split(",")] if args.levels else None
    except ValueError:
        raise EvalError(f"--levels must be numbers like 1,2, not {args.levels!r}") from None
    paths = discover(Path(args.path), levels)
    paths = paths[args.start :]
    if args.limit is not None:
        paths = paths[: args.limit]
    if not paths:
        raise EvalError(f"{args.path}: no problem files found")
    if args.out is None:
        args.out = args.resume
    if args.out is not None:  # refused now, in one line, not after the first problem ran
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise EvalError(f"--out {args.out}: {error.strerror}") from None
        if not os.access(args.out.parent, os.W_OK) or args.out.is_dir():
            raise EvalError(f"--out {args.out}: cannot write there")
    if args.optimize:
        return _run_optimize(paths, args, argv)
    previous = _resumed(args, optimize=False)
    options = BenchOptions(
        baseline=args.baseline,
        eval=EvalOptions(
            device=args.device,
            size=args.size,
            threads=args.threads,
            timing_budget_s=args.timing_budget,
            jail=args.jail,
        ),
        command="kernel-agent " + shlex.join(argv),
    )
    console = make_console(stderr=args.json)
    clock = _clock(args)
    with _interrupts(clock) as interrupts, BenchView(len(paths), "benchmarking") as view:

        def advance(report: BenchReport) -> None:
            view.finished()
            if args.out:  # after every problem, so a run cut short keeps what it measured
                _save(report.to_json(), args.out)

        with clock.running():
            report = run_bench(
                paths,
                options,
                on_report=advance,
                previous=previous,
                clock=clock,
                on_phase=view.show,
            )
    if args.plot:
        plot_report(report, args.plot)
    _print(report, args, console)
    return _finish(clock, interrupts, ok=all(row.verdict != "error" for row in report.rows))


def _save(data: dict, path: Path) -> None:
    """Write the report whole or not at all (a temporary file, then a rename): a run killed
    mid-write must leave the previous report for --resume, not half a JSON document."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(json.dumps(data, indent=2))
        os.replace(partial, path)
    except OSError as error:
        raise EvalError(f"--out {path}: cannot write the report ({error.strerror})") from None


def _resumed(args: argparse.Namespace, optimize: bool):
    """The report `--resume` continues, or None to start afresh (no file there yet: the same
    command can be run again until the benchmark is complete). The kind must match the run's,
    plain or --optimize; anything else is a one-line usage error."""
    path = args.resume
    if path is None or not path.exists():
        return None
    from agents.bench.optimize import OptimizeReport

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise EvalError(f"--resume: {path}: not a bench report ({error})") from None
    saved_optimize = isinstance(data, dict) and "memory" in data
    if saved_optimize != optimize:
        kinds = {True: "a bench --optimize report", False: "a plain bench report"}
        raise EvalError(
            f"--resume: {path} is {kinds[saved_optimize]}, but this run makes {kinds[optimize]}"
        )
    try:
        previous = (OptimizeReport if optimize else BenchReport).from_json(data)
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise EvalError(f"--resume: {path}: not a bench report ({error})") from None
    check_resumable(previous, args.device, args.size)  # before any progress is drawn
    return previous


def _print(report: BenchReport, args: argparse.Namespace, console: Console) -> None:
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif args.markdown:
        print(markdown_report(report))
    else:
        render_report(report, console)


def _render_saved(args: argparse.Namespace) -> int:
    from agents.bench.optimize import OptimizeReport, merge_optimize_reports
    from agents.bench.optimize_render import optimize_markdown, render_optimize

    saved = []
    for path in args.from_json:
        try:
            saved.append(json.loads(path.read_text()))
        except (OSError, ValueError) as error:
            raise EvalError(f"{path}: not a bench report ({error})") from None
    optimize_kinds = {"memory" in data for data in saved if isinstance(data, dict)}
    if optimize_kinds == {True}:
        try:
            merged = merge_optimize_reports([OptimizeReport.from_json(d) for d in saved])
        except (ValueError, TypeError, KeyError) as error:
            raise EvalError(f"--from-json: not --optimize reports of one setup ({error})") from None
        if args.json:
            print(json.dumps(merged.to_json(), indent=2))
        elif args.markdown:
            print(optimize_markdown(merged))
        else:
            render_optimize(merged, make_console())
        return 0
    parts = []
    for path, data in zip(args.from_json, saved, strict=True):
        try:
            parts.append(BenchReport.from_json(data))
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise EvalError(f"{path}: not a bench report ({error})") from None
    try:
        report = merge_reports(parts)
    except ValueError as error:
        raise EvalError(f"--from-json: {error}") from None
    if args.plot:
        plot_report(report, args.plot)
    _print(report, args, make_console())
    return 0


def _run_optimize(paths: list[Path], args: argparse.Namespace, argv: list[str]) -> int:
    from agents.bench.optimize import OptimizeBenchOptions, run_optimize_bench
    from agents.bench.optimize_render import optimize_markdown, render_optimize
    from agents.request.run import pool_settings
    from agents.request.settings import BudgetSettings, EvaluationSettings

    if args.max_evals < 1:
        raise EvalError("--max-evals must be at least 1")
    if args.parallel_evals < 1:
        raise EvalError("--parallel-evals must be at least 1")
    evaluation = EvaluationSettings(
        device=args.device,
        size=args.size,
        threads=args.threads,
        timing_budget=args.timing_budget,
        jail=args.jail,
        parallel_evals=args.parallel_evals,
        eval_backend=getattr(args, "evaluation.eval_backend"),
        ray_address=getattr(args, "evaluation.ray_address"),
    )
    pool_settings(evaluation)  # a contradiction is refused before any problem runs
    options = OptimizeBenchOptions(
        evaluation=evaluation,
        budget=BudgetSettings(max_evals=args.max_evals),
        memory=args.memory,
        command="kernel-agent " + shlex.join(argv),
    )
    previous = _resumed(args, optimize=True)
    console = make_console(stderr=args.json)
    clock = _clock(args)
    with _interrupts(clock) as interrupts, BenchView(len(paths), "optimizing") as view:

        def advance(report) -> None:
            view.finished()
            if args.out:
                _save(report.to_json(), args.out)

        with clock.running():
            report = run_optimize_bench(
                paths, options, on_row=advance, clock=clock, previous=previous, on_phase=view.show
            )
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif args.markdown:
        print(optimize_markdown(report))
    else:
        render_optimize(report, console)
    return _finish(clock, interrupts, ok=all(row.verdict != "error" for row in report.rows))


def _clock(args: argparse.Namespace) -> BenchClock:
    """The run's budgets, checked before anything runs."""
    try:
        check_budget("--max-time", args.max_time)
        check_budget("--problem-time", args.problem_time)
    except ValueError as error:
        raise EvalError(str(error)) from None
    return BenchClock(max_time=args.max_time, problem_time=args.problem_time)


def _interrupts(clock: BenchClock) -> Interrupts:
    err = make_console(stderr=True)
    return Interrupts(clock.run, lambda line: err.print(f"[yellow]{line}[/yellow]"))


def _finish(clock: BenchClock, interrupts: Interrupts, ok: bool) -> int:
    """The closing line naming what was cut or not run, and the exit status: 0 when every
    problem ran to its end, 1 when one failed or was cut, 128 + signal after Ctrl-C/SIGTERM."""
    line = clock.summary()
    if line:
        print(f"kernel-agent bench: {line}", file=sys.stderr)
    return interrupts.exit_code(0 if ok and not (clock.cut or clock.not_run) else 1)
