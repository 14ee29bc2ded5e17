"""`kernel-agent optimize`: run the search on one KernelBench-format file.

The arguments become an `OptimizeRequest` (a config file's settings first, then the flags
given) and agents/request/run.py runs it, as it runs the editor's. Each flag's dest is its
field path in the request (`--iterations` → `search.iterations`), and a flag left out is
absent from the parsed arguments, so a config file's value stands unless a flag is given.

Exit status: 0 when a result was produced ("no improvement" included), 1 when the search
failed, 2 for a usage error (a reference that fails on its own included). `--max-time` is a
deadline: whatever runs then is cancelled and the best verified kernel so far is written.
Ctrl-C (SIGINT) and SIGTERM do the same and exit 130 and 143.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from agents.cli import print_error
from agents.cli.pool_arguments import add_pool_arguments
from agents.llm.config import BACKENDS
from agents.request import defaults
from agents.request.defaults import DEVICES
from agents.request.requests import OptimizeRequest
from agents.request.settings import RequestError
from agents.request.table import BY_PATH, read_config, with_values
from agents.targets.load import load_target, split_spec
from agents.task import SIZE_HELP, SIZES

EXIT_DONE, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
GIVEN = argparse.SUPPRESS  # a request's flag is in the parsed arguments only when given


def add_optimize_parser(commands: Any) -> None:
    opt = commands.add_parser(
        "optimize",
        help="search for a faster, verified ModelNew for a KernelBench-format file",
        description="Profile FILE's Model, plan and write rewrites with the chosen backend, "
        "verify and time each in the sandbox, and write the fastest verified one.",
    )
    opt.add_argument(
        "file",
        metavar="FILE.py[::NAME]",
        help="a KernelBench-format problem (its Model), or NAME in FILE.py: a Triton "
        "launcher, a plain function, a function calling a CUDA extension, a module class",
    )
    _add_llm_arguments(opt)
    _add_search_arguments(opt)
    _add_budget_arguments(opt)
    _add_evaluation_arguments(opt)
    _add_output_arguments(opt)


def _add_llm_arguments(opt: argparse.ArgumentParser) -> None:
    llm = opt.add_argument_group("models", "every role's; a --config file can set each role's")
    llm.add_argument(
        "--backend",
        "--llm",
        dest="llm.backend",
        choices=BACKENDS,
        default=GIVEN,
        help="backend of every role (default: the config file's, else offline; --llm is the "
        "old name)",
    )
    llm.add_argument(
        "--model", dest="llm.model", default=GIVEN, metavar="MODEL", help="model for every role"
    )
    llm.add_argument(
        "--base-url",
        dest="llm.base_url",
        default=GIVEN,
        metavar="URL",
        help="OpenAI-compatible or Anthropic base URL",
    )
    llm.add_argument(
        "--config",
        type=Path,
        default=None,
        help="TOML: per-role models and prices ([llm], [llm.ROLE], [prices]) and any "
        "setting below by its group ([search] iterations = 8); flags given win",
    )


def _add_search_arguments(opt: argparse.ArgumentParser) -> None:
    llm, offline = defaults.LLM_SEARCH, defaults.OFFLINE_SEARCH
    search = opt.add_argument_group(
        "search",
        f"defaults: AccelOpt's B={llm['beam']} N={llm['plans']} K={llm['samples']} "
        f"T={llm['iterations']} with an LLM; B={offline['beam']} N={offline['plans']} "
        f"K={offline['samples']} T={offline['iterations']} offline",
    )
    for flag, metavar, text in (
        ("--beam", "B", "best kernels kept"),
        ("--plans", "N", "plans per iteration"),
        ("--samples", "K", "rewrites written per plan"),
        ("--iterations", "T", "iterations (--iters is the old name)"),
        ("--patience", "P", "stop after P iterations without a new best"),
        ("--repairs", "R", "attempts to fix a rewrite that fails to build or run"),
    ):
        name = flag.removeprefix("--")
        aliases = ["--iters"] if name == "iterations" else []
        search.add_argument(
            flag,
            *aliases,
            dest=f"search.{name}",
            type=int,
            default=GIVEN,
            metavar=metavar,
            help=text,
        )
    search.add_argument(
        "--profile",
        dest="search.profile",
        action=argparse.BooleanOptionalAction,
        default=GIVEN,
        help="profile the problem first, so plans aim at its hot lines (default: on)",
    )


def _add_budget_arguments(opt: argparse.ArgumentParser) -> None:
    budget = opt.add_argument_group("budget", "the search stops at the first one reached")
    budget.add_argument(
        "--max-evals",
        dest="budget.max_evals",
        type=int,
        default=GIVEN,
        metavar="E",
        help=f"stop after E evaluations (default: {defaults.MAX_EVALS})",
    )
    budget.add_argument(
        "--max-cost",
        dest="budget.max_cost",
        type=float,
        default=GIVEN,
        metavar="USD",
        help="stop at this model spend",
    )
    budget.add_argument(
        "--max-tokens",
        dest="budget.max_tokens",
        type=int,
        default=GIVEN,
        metavar="TOKENS",
        help="stop at this many tokens",
    )
    budget.add_argument(
        "--max-time",
        dest="budget.max_time",
        type=float,
        default=GIVEN,
        metavar="SECONDS",
        help="wall-clock budget: what runs then is cancelled, and the best kernel verified so "
        "far is written",
    )


def _add_evaluation_arguments(opt: argparse.ArgumentParser) -> None:
    ev = opt.add_argument_group("evaluation", "how each candidate is verified and timed")
    ev.add_argument(
        "--device",
        dest="evaluation.device",
        choices=DEVICES,
        default=GIVEN,
        help="verify and time on (default: cpu)",
    )
    ev.add_argument(
        "--size",
        dest="evaluation.size",
        choices=SIZES,
        default=GIVEN,
        help=SIZE_HELP,
    )
    ev.add_argument(
        "--parallel-evals",
        dest="evaluation.parallel_evals",
        type=int,
        default=GIVEN,
        metavar="N",
        help="candidates built and checked at once (timings stay one per device; default: 1)",
    )
    add_pool_arguments(ev, given_only=True)
    ev.add_argument(
        "--timing-budget",
        dest="evaluation.timing_budget",
        type=float,
        default=GIVEN,
        metavar="SECONDS",
        help="longest timing per candidate, even if the medians are not yet stable "
        f"(default: {defaults.SEARCH_TIMING_BUDGET_S:g})",
    )
    ev.add_argument(
        "--threads",
        dest="evaluation.threads",
        type=int,
        default=GIVEN,
        metavar="N",
        help="CPU threads (default: all)",
    )
    ev.add_argument(
        "--jail",
        dest="evaluation.jail",
        action=argparse.BooleanOptionalAction,
        default=GIVEN,
        help="run candidates in the bubblewrap jail (limits apply either way; default: on)",
    )
    ev.add_argument(
        "--seed", type=int, default=GIVEN, help="seed for sampling and inputs (default: 0)"
    )


def _add_output_arguments(opt: argparse.ArgumentParser) -> None:
    out = opt.add_argument_group("output and memory")
    out.add_argument(
        "--output",
        type=Path,
        default=None,
        metavar="OUT.py",
        help="where the verified kernel goes (default: FILE_optimized.py)",
    )
    out.add_argument(
        "--trajectory",
        type=Path,
        default=None,
        metavar="TRAJECTORY.json",
        help="write the result and every evaluation as JSON",
    )
    out.add_argument(
        "--plot",
        type=Path,
        default=None,
        metavar="PLOT.png",
        help="draw the best speedup against evaluations",
    )
    out.add_argument(
        "--memory",
        dest="memory.path",
        type=Path,
        default=GIVEN,
        metavar="FILE",
        help="memory file (default: per user)",
    )
    out.add_argument(
        "--no-memory",
        dest="memory.enabled",
        action="store_false",
        default=GIVEN,
        help="neither read nor write memory",
    )
    out.add_argument("--json", action="store_true", help="print one JSON object")
    out.add_argument("--quiet", action="store_true", help="no progress display")


def optimize_request(args: argparse.Namespace) -> OptimizeRequest:
    """The request the arguments make: FILE's problem, a --config file's settings, then the
    flags given (--backend, --model and --base-url over every role)."""
    request = OptimizeRequest(load_target(args.file))
    if args.config is not None:
        request = with_values(request, read_config(args.config))
    given = {name: value for name, value in vars(args).items() if name in BY_PATH}
    every_role = {name: given.pop(f"llm.{name}", None) for name in ("backend", "model", "base_url")}
    request = with_values(request, given)
    return replace(request, llm=request.llm.for_every_role(**every_role))


def run_optimize(args: argparse.Namespace) -> int:
    from agents.evaluate import EvalError
    from agents.llm.base import MissingAPIKeyError
    from agents.roles.factory import RoleSetupError
    from memory.store import MemoryStoreError

    try:
        return _run(args)
    except (RequestError, RoleSetupError, MissingAPIKeyError, EvalError) as error:
        print_error("optimize", error)
        return EXIT_USAGE
    except MemoryStoreError as error:
        print_error("optimize", error)
        return EXIT_FAILED


def _run(args: argparse.Namespace) -> int:
    from agents.cli.interrupt import Interrupts
    from agents.display import make_console
    from agents.llm.base import LLMError
    from agents.request.run import open_search
    from agents.search.budget import CancelToken
    from agents.search.progress import ProgressView

    request = optimize_request(args).resolved()
    path, _ = split_spec(args.file)
    _check_writable(args, path)
    err = make_console(stderr=True, quiet=args.quiet)
    view = ProgressView(err, request.search.iterations, request.budget.max_evals)
    cancel = CancelToken()
    say = lambda line: err.print(f"[yellow]{line}[/yellow]")  # noqa: E731
    with Interrupts(cancel, say) as interrupts:
        request, plan = _fit_sizes(request, cancel)
        if plan.line():
            err.print(plan.line())
        with open_search(request, on_event=view, cancel=cancel) as job:
            if job.memory_note:
                err.print(f"[yellow]memory:[/yellow] {job.memory_note}")
            try:
                with view:
                    result = job.run()
            except LLMError as error:
                print_error("optimize", error)
                return interrupts.exit_code(EXIT_FAILED)
        _write(args, result, path, request, plan.to_json() if plan.line() else None)
    failed = not result.improved and result.evaluations == 0 and "failed" in result.stopped_because
    return interrupts.exit_code(EXIT_FAILED if failed else EXIT_DONE)


def _fit_sizes(request: OptimizeRequest, cancel) -> tuple[OptimizeRequest, Any]:
    """`--size fit` resolved once, before the search (its line is printed, its sizes go in
    the JSON); any other size passes as it is."""
    from agents.sizing.api import resolve_size

    evaluation = request.evaluation
    plan = resolve_size(
        request.target.problem,
        evaluation.size,
        device=evaluation.device,
        threads=evaluation.threads or 1,
        use_jail=evaluation.jail,
        cancel=cancel.event,
    )
    return replace(request, evaluation=replace(evaluation, size=plan.size)), plan


def _write(
    args: argparse.Namespace,
    result,
    path: Path,
    request: OptimizeRequest,
    sizes: dict[str, list[int]] | None = None,
) -> None:
    """The kernel, the trajectory, the plot and the report: also after a cut or a Ctrl-C,
    with the best kernel verified so far."""
    from agents.cli.optimize_report import report, write_output
    from agents.display import make_console
    from agents.search.result import plot_trajectory

    written = write_output(result, path, args.output, request.target)
    output = written[0] if written else None
    if args.trajectory:
        result.write_trajectory(args.trajectory)
    if args.plot:
        plot_trajectory(result, args.plot)
    if args.json:
        data = result.to_json()
        data["output"] = str(output) if output else None
        if sizes is not None:
            data["sizes"] = sizes
        print(json.dumps(data))
    else:
        report(result, written, request.target, make_console())


def _check_writable(args: argparse.Namespace, source: Path) -> None:
    """Refuse, before the search spends anything, a file that could not be written after it."""
    wanted = {"--output": args.output, "--trajectory": args.trajectory, "--plot": args.plot}
    if args.output is None:
        wanted["the rewrite (pass --output to choose)"] = source.with_name(
            f"{source.stem}_optimized.py"
        )
    for option, target in wanted.items():
        if target is None:
            continue
        folder = Path(target).parent
        if not folder.is_dir():
            raise RequestError(
                f"{option} {target}: the folder {folder} does not exist; create it or choose "
                "another path"
            )
        if not os.access(folder, os.W_OK):
            raise RequestError(
                f"{option} {target}: the folder {folder} is not writable; choose another path"
            )
        if Path(target).is_dir():
            raise RequestError(f"{option} {target} is a folder; give a file path")
