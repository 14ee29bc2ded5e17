"""`kernel-agent bench`: time eager and torch.compile over a problem suite."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agents.bench.render import markdown_report, plot_report, render_report
from agents.bench.report import BenchReport, merge_reports
from agents.bench.runner import BenchOptions, run_bench
from agents.bench.suite import BASELINES, discover
from agents.evalpool import add_pool_arguments, pool_settings
from agents.evaluate import DEVICES, EvalError, EvalOptions
from agents.task import SIZES


def add_bench_parser(commands) -> None:
    bench = commands.add_parser(
        "bench",
        help="time eager and a baseline (torch.compile, or eager itself) over a suite",
        description="Verify and time a baseline (torch.compile) against eager for every "
        "problem in PATH: our bench/problems, or a KernelBench checkout's level folders.",
    )
    bench.add_argument("path", metavar="PATH", nargs="?", default="bench/problems")
    bench.add_argument("--device", choices=DEVICES, default="cpu")
    bench.add_argument("--size", choices=SIZES, default="default")
    bench.add_argument("--baseline", choices=BASELINES, default="torch.compile")
    bench.add_argument("--levels", default=None, help="KernelBench levels, e.g. 1,2")
    bench.add_argument("--start", type=int, default=0, help="skip the first N problems")
    bench.add_argument("--limit", type=int, default=None, help="run at most N problems")
    bench.add_argument("--threads", type=int, default=None)
    bench.add_argument("--timing-budget", type=float, default=3.0, metavar="SECONDS")
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
    bench.add_argument("--plot", type=Path, default=None, help="draw speedups to a PNG")
    bench.add_argument("--no-jail", action="store_true")
    bench.add_argument(
        "--optimize",
        action="store_true",
        help="run the offline optimizer on every problem; compare with eager and torch.compile",
    )
    bench.add_argument(
        "--memory", type=Path, default=None, help="--optimize: memory file (default: fresh)"
    )
    bench.add_argument("--max-evals", type=int, default=40, help="--optimize: per problem")
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
    if args.optimize:
        return _run_optimize(paths, args, argv)
    options = BenchOptions(
        baseline=args.baseline,
        eval=EvalOptions(
            device=args.device,
            size=args.size,
            threads=args.threads,
            timing_budget_s=args.timing_budget,
            jail=not args.no_jail,
        ),
        command="kernel-agent " + shlex.join(argv),
    )
    console = Console(stderr=args.json)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task("benchmarking", total=len(paths))

        def advance(report: BenchReport) -> None:
            row = report.rows[-1]
            progress.update(task, advance=1, description=f"{row.problem}: {row.verdict}")
            if args.out:  # after every problem, so a run cut short keeps what it measured
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(report.to_json(), indent=2))

        report = run_bench(paths, options, on_report=advance)
    if args.plot:
        plot_report(report, args.plot)
    _print(report, args, console)
    return 0 if all(row.verdict != "error" for row in report.rows) else 1


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
            render_optimize(merged, Console())
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
    _print(report, args, Console())
    return 0


def _run_optimize(paths: list[Path], args: argparse.Namespace, argv: list[str]) -> int:
    from agents.bench.optimize import OptimizeBenchOptions, run_optimize_bench
    from agents.bench.optimize_render import optimize_markdown, render_optimize
    from agents.optimize_command import OFFLINE_DEFAULTS
    from agents.search.beam import SearchConfig
    from agents.search.budget import Budget

    if args.max_evals < 1:
        raise EvalError("--max-evals must be at least 1")
    if args.parallel_evals < 1:
        raise EvalError("--parallel-evals must be at least 1")
    d = OFFLINE_DEFAULTS
    options = OptimizeBenchOptions(
        eval=EvalOptions(
            device=args.device,
            size=args.size,
            threads=args.threads,
            timing_budget_s=args.timing_budget,
            jail=not args.no_jail,
        ),
        search=SearchConfig(
            beam=d["beam"],
            plans=d["plans"],
            samples=d["samples"],
            iterations=d["iters"],
            patience=d["patience"],
            repairs=d["repairs"],
            parallel_evals=args.parallel_evals,
        ),
        budget=Budget(max_evals=args.max_evals),
        memory=args.memory,
        command="kernel-agent " + shlex.join(argv),
        pool=pool_settings(args, build_slots=args.parallel_evals),
    )
    console = Console(stderr=args.json)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task("optimizing", total=len(paths))

        def advance(report) -> None:
            row = report.rows[-1]
            progress.update(
                task, advance=1, description=f"{row.problem}: {row.verdict} {row.speedup:.2f}x"
            )
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(report.to_json(), indent=2))

        report = run_optimize_bench(paths, options, on_row=advance)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif args.markdown:
        print(optimize_markdown(report))
    else:
        render_optimize(report, console)
    return 0 if all(row.verdict != "error" for row in report.rows) else 1
