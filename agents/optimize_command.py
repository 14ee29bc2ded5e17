"""`kernel-agent optimize`: run the search on one KernelBench-format file.

Exit status: 0 when a result was produced ("no improvement" included), 1 when the search
failed, 2 for a usage error. Ctrl-C cancels: the best verified kernel so far is kept.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from agents.display import format_ms, make_console, plural
from agents.evalpool import EvalService, PoolSetupError, add_pool_arguments, make_pool
from agents.evalpool import pool_settings as pool_settings_from
from agents.evaluate import DEVICES, EvalError, EvalOptions
from agents.llm.accounting import CostMeter
from agents.llm.base import ChatModel, LLMError, MissingAPIKeyError
from agents.llm.config import LLMConfig, load_settings
from agents.llm.pricing import unpriced_note
from agents.roles.factory import BACKENDS, OfflineSetup, RoleSetupError, build_roles
from agents.search.beam import Search, SearchConfig, SearchMemory, run_search
from agents.search.budget import Budget, CancelToken
from agents.search.events import SearchEvent
from agents.search.fates_table import fates_table, fates_title
from agents.search.progress import ProgressView
from agents.search.result import SearchResult, plot_trajectory
from agents.task import SIZES, SourceFile, TaskLoadError, outline_problem
from memory.experiences import ExperienceStore
from memory.logbook import Logbook
from memory.store import MemoryStore, MemoryStoreError

EXIT_DONE, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


LLM_DEFAULTS = {"beam": 6, "plans": 12, "samples": 2, "iters": 16, "patience": 4, "repairs": 2}
OFFLINE_DEFAULTS = {"beam": 3, "plans": 6, "samples": 1, "iters": 6, "patience": 2, "repairs": 0}
"""Passes are deterministic (one sample is enough) and few (six plans cover them)."""


class OptimizeUsageError(Exception):
    """A bad request (file, setting, key): one line, exit status 2."""


def add_optimize_parser(commands) -> None:
    opt = commands.add_parser(
        "optimize",
        help="search for a faster, verified ModelNew for a KernelBench-format file",
        description="Profile FILE's Model, plan and write rewrites with the chosen backend, "
        "verify and time each in the sandbox, and write the fastest verified one.",
    )
    opt.add_argument("file", metavar="FILE.py", help="a KernelBench-format problem (Model)")
    opt.add_argument(
        "--llm", choices=BACKENDS, default=None, help="default: the config file's, else offline"
    )
    opt.add_argument("--model", default=None, help="model name for every role")
    opt.add_argument("--base-url", default=None, help="OpenAI-compatible or Anthropic base URL")
    opt.add_argument("--config", type=Path, default=None, help="TOML: per-role models, prices")
    opt.add_argument(
        "--device", choices=DEVICES, default="cpu", help="verify and time on (default: cpu)"
    )
    opt.add_argument(
        "--size", choices=SIZES, default="default", help="gpu: apply the problem's GPU_SIZES"
    )
    search = opt.add_argument_group(
        "search", "defaults: AccelOpt's B=6 N=12 K=2 T=16 with an LLM; B=3 N=6 K=1 T=6 offline"
    )
    search.add_argument("--beam", type=int, default=None, metavar="B", help="best kernels kept")
    search.add_argument("--plans", type=int, default=None, metavar="N", help="plans per iteration")
    search.add_argument(
        "--samples", type=int, default=None, metavar="K", help="rewrites written per plan"
    )
    search.add_argument("--iters", type=int, default=None, metavar="T", help="iterations")
    search.add_argument(
        "--patience",
        type=int,
        default=None,
        metavar="P",
        help="stop after P iterations without a new best",
    )
    search.add_argument(
        "--repairs",
        type=int,
        default=None,
        metavar="R",
        help="attempts to fix a rewrite that fails to build or run",
    )
    opt.add_argument(
        "--max-evals", type=int, default=100, metavar="E", help="stop after E evaluations"
    )
    opt.add_argument(
        "--max-cost", type=float, default=None, metavar="USD", help="stop at this model spend"
    )
    opt.add_argument("--max-tokens", type=int, default=None, help="stop at this many tokens")
    opt.add_argument(
        "--max-time", type=float, default=None, metavar="SECONDS", help="stop after this long"
    )
    opt.add_argument(
        "--parallel-evals",
        type=int,
        default=1,
        help="candidates built and checked at once (timings stay one per device)",
    )
    add_pool_arguments(opt)
    opt.add_argument(
        "--timing-budget",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="longest timing per candidate, even if the medians are not yet stable",
    )
    opt.add_argument("--threads", type=int, default=None, help="CPU threads (default: all)")
    opt.add_argument("--seed", type=int, default=0, help="seed for sampling and inputs")
    opt.add_argument(
        "--output",
        type=Path,
        default=None,
        metavar="OUT.py",
        help="where the verified kernel goes (default: FILE_optimized.py)",
    )
    opt.add_argument(
        "--trajectory",
        type=Path,
        default=None,
        metavar="TRAJECTORY.json",
        help="write the result and every evaluation as JSON",
    )
    opt.add_argument(
        "--plot",
        type=Path,
        default=None,
        metavar="PLOT.png",
        help="draw the best speedup against evaluations",
    )
    opt.add_argument("--memory", type=Path, default=None, help="memory file (default: per user)")
    opt.add_argument("--no-memory", action="store_true", help="neither read nor write memory")
    opt.add_argument(
        "--no-profile", action="store_true", help="plan without profiling the problem first"
    )
    opt.add_argument(
        "--no-jail", action="store_true", help="skip the bubblewrap jail (limits still apply)"
    )
    opt.add_argument("--json", action="store_true", help="print one JSON object")
    opt.add_argument("--quiet", action="store_true", help="no progress display")


def run_optimize(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except (OptimizeUsageError, RoleSetupError, MissingAPIKeyError, EvalError) as error:
        print(f"kernel-agent optimize: {error}", file=sys.stderr)
        return EXIT_USAGE
    except MemoryStoreError as error:
        print(f"kernel-agent optimize: {error}", file=sys.stderr)
        return EXIT_FAILED


def _config_backend(path: Path | None) -> str:
    """The backend a config file chooses, for picking search defaults (errors come later)."""
    if path is None:
        return "offline"
    try:
        settings = load_settings(path, default=LLMConfig(backend="offline"))
    except ValueError:
        return "offline"
    return settings.models.for_role("planner").backend


def _run(args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise OptimizeUsageError(f"cannot read {path}: {error}") from None
    reference = SourceFile(text, str(path))
    try:
        outline_problem(reference)
    except TaskLoadError as error:
        raise OptimizeUsageError(str(error)) from None
    _check_writable(args, path)
    apply_search_defaults(args)
    err = make_console(stderr=True, quiet=args.quiet)
    view = ProgressView(err, args.iters, args.max_evals)
    cancel = CancelToken()
    setup = build_search(args, reference, on_event=view, cancel=cancel, task_name=path.stem)
    search, models, store = setup.search, setup.models, setup.store
    if store is not None and store.recovered_from:
        err.print(f"[yellow]memory:[/yellow] {store.recovered_from}")
    previous = signal.getsignal(signal.SIGINT)

    def interrupt(signum, frame) -> None:
        if cancel.cancelled:  # a second Ctrl-C: stop now
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        cancel.cancel()
        err.print("[yellow]cancelling: keeping the best verified kernel so far[/yellow]")

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    try:
        with view:
            result = asyncio.run(_search(search, models))
    except LLMError as error:
        print(f"kernel-agent optimize: {error}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        setup.close()
    output = _write_output(result, path, args.output)
    if args.trajectory:
        result.write_trajectory(args.trajectory)
    if args.plot:
        plot_trajectory(result, args.plot)
    if args.json:
        data = result.to_json()
        data["output"] = str(output) if output else None
        print(json.dumps(data))
    else:
        _report(result, output, reference, make_console())
    failed = not result.improved and result.evaluations == 0 and "failed" in result.stopped_because
    return EXIT_FAILED if failed else EXIT_DONE


def optimize_defaults(file: str) -> argparse.Namespace:
    """The `optimize` command's arguments for FILE with every default, for callers other
    than the command line (the language server's worker) that must search alike."""
    parser = argparse.ArgumentParser(add_help=False)
    add_optimize_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["optimize", file])


def apply_search_defaults(args: argparse.Namespace) -> None:
    """Fill the search shape (beam, plans, ...) the user left out: LLM or offline defaults."""
    offline = (args.llm or _config_backend(args.config)) == "offline"
    defaults = OFFLINE_DEFAULTS if offline else LLM_DEFAULTS
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


@dataclass
class SearchSetup:
    """A search ready to run, the chat models to close and the memory store to close."""

    search: Search
    models: list[ChatModel]
    store: MemoryStore | None

    def close(self) -> None:
        """The memory store and the evaluation pool (a local Ray it started stops here)."""
        try:
            self.search.pool.close()
        finally:
            if self.store is not None:
                self.store.close()


def build_search(
    args: argparse.Namespace,
    reference: SourceFile,
    *,
    on_event: Callable[[SearchEvent], None] | None,
    cancel: CancelToken,
    task_name: str,
) -> SearchSetup:
    """The Search that `optimize` runs, from its arguments (after `apply_search_defaults`).
    Raises OptimizeUsageError, RoleSetupError, MissingAPIKeyError or MemoryStoreError."""
    try:
        config = SearchConfig(
            beam=args.beam,
            plans=args.plans,
            samples=args.samples,
            iterations=args.iters,
            patience=args.patience,
            repairs=args.repairs,
            parallel_evals=args.parallel_evals,
            profile=not args.no_profile,
            seed=args.seed,
        )
        budget = Budget(
            max_evals=args.max_evals,
            max_tokens=args.max_tokens,
            max_cost_usd=args.max_cost,
            max_wall_s=args.max_time,
        )
    except ValueError as error:
        raise OptimizeUsageError(str(error)) from None
    if args.timing_budget <= 0:
        raise OptimizeUsageError("--timing-budget must be positive")
    options = EvalOptions(
        device=args.device,
        size=args.size,
        threads=args.threads,
        timing_budget_s=args.timing_budget,
        jail=not args.no_jail,
    )
    meter = CostMeter()
    store = None if args.no_memory else MemoryStore(args.memory)
    memory = (
        SearchMemory()
        if store is None
        else SearchMemory(experiences=ExperienceStore(store), logbook=Logbook(store))
    )
    try:
        roles, models = build_roles(
            args.llm,
            meter,
            model=args.model,
            base_url=args.base_url,
            config_path=args.config,
            device=args.device,
            offline=OfflineSetup(reference, options, memory.experiences, cancel.event),
        )
        if args.max_cost is not None:
            _check_priced(models)
        pool = open_pool(args)  # last: a local Ray is started only for a search that runs
    except BaseException:
        if store is not None:
            store.close()
        raise
    search = Search(
        reference,
        roles,
        meter,
        options=options,
        config=config,
        budget=budget,
        memory=memory,
        on_event=on_event,
        cancel=cancel,
        task_name=task_name,
        pool=pool,
    )
    return SearchSetup(search, models, store)


def _check_priced(models: list[ChatModel]) -> None:
    """--max-cost is held before each call by the model's price: refuse a model without
    one rather than let the cap silently count it as free."""
    for model in models:
        if getattr(model, "priced", True) is False:
            asyncio.run(model.aclose())
            name = model.label.split(":", 1)[-1]
            raise OptimizeUsageError(
                f"--max-cost cannot be held: {unpriced_note(name)}, or cap --max-tokens instead"
            )


def open_pool(args: argparse.Namespace) -> EvalService:
    """The evaluation backend the arguments choose; OptimizeUsageError in one line."""
    try:
        return make_pool(pool_settings_from(args, build_slots=args.parallel_evals))
    except PoolSetupError as error:
        raise OptimizeUsageError(str(error)) from None


async def _search(search: Search, models) -> SearchResult:
    try:
        return await run_search(search)
    finally:
        for model in models:
            await model.aclose()


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
            raise OptimizeUsageError(
                f"{option} {target}: the folder {folder} does not exist; create it or choose "
                "another path"
            )
        if not os.access(folder, os.W_OK):
            raise OptimizeUsageError(
                f"{option} {target}: the folder {folder} is not writable; choose another path"
            )
        if Path(target).is_dir():
            raise OptimizeUsageError(f"{option} {target} is a folder; give a file path")


def _write_output(result: SearchResult, source: Path, wanted: Path | None) -> Path | None:
    """Write the verified kernel; never over the user's own file."""
    if result.source is None:
        return None
    target = wanted or source.with_name(f"{source.stem}_optimized.py")
    if target.resolve() == source.resolve():
        raise OptimizeUsageError(f"--output {target} is the input file; choose another path")
    # A comment, not a docstring: the module's own docstring must stay its first statement.
    header = (
        f"# Verified by kernel-agent: {result.speedup:.2f}x over {source.name} on "
        f"{result.device} ({', '.join(result.methods) or 'rewrite'}).\n"
    )
    body = result.source
    if body.lstrip().startswith("# Verified by kernel-agent"):
        header = ""
    target.write_text(header + body, encoding="utf-8")
    return target


def speedup_basis(result: SearchResult) -> str:
    """Where the one speedup reported (the JSON's `speedup`) comes from: the two medians of
    the confirming evaluation, whose ratio it is. The search's own, earlier measurement of
    a kernel ("new best 8.50x") is named as such when it rounds differently, so two numbers
    for one kernel never stand side by side unexplained."""
    report = result.eval_report or {}
    reference_ms, candidate_ms = report.get("reference_ms"), report.get("candidate_ms")
    if not (result.confirmed and reference_ms and candidate_ms):
        return "  measured during the search; not re-measured on fresh inputs"
    line = (
        f"  = reference {format_ms(reference_ms)} ms / candidate {format_ms(candidate_ms)} ms "
        "(medians, re-measured on fresh inputs after the search)"
    )
    searched = max((point.best_speedup for point in result.trajectory), default=0.0)
    if f"{searched:.2f}" != f"{result.speedup:.2f}" and searched > 1.0:
        line += f"; the search's own best measurement was {searched:.2f}x"
    return line


def _report(result: SearchResult, output: Path | None, ref: SourceFile, out: Console) -> None:
    if result.improved and result.source is not None:
        ci = (
            f" (95% CI {result.speedup_ci[0]:.2f}-{result.speedup_ci[1]:.2f})"
            if result.speedup_ci
            else ""
        )
        out.print(
            f"[green]verified {result.speedup:.2f}x faster[/green]{ci} on {result.device}: "
            + escape(" → ".join(result.methods))
        )
        out.print(speedup_basis(result), markup=False, highlight=False)
        diff = difflib.unified_diff(
            ref.text.splitlines(),
            result.source.splitlines(),
            fromfile=ref.label,
            tofile=str(output),
            lineterm="",
        )
        out.print("\n".join(list(diff)[:80]), markup=False, highlight=False)
        out.print(f"written to {output}")
    else:
        out.print("no improvement: no verified kernel was faster than the original")
    if result.candidates:
        out.print(fates_table([("", result.candidates)], title=fates_title(result.candidates)))
    for note in result.notes:
        out.print(f"note: {note}", markup=False)
    out.print(
        f"{plural(result.evaluations, 'evaluation')}, {plural(result.iterations, 'iteration')}, "
        f"{result.elapsed_s:.0f} s; stopped: {result.stopped_because}",
        markup=False,
    )
    out.print(cost_line(result.cost), markup=False)


def cost_line(cost: dict) -> str:
    """What the model calls cost, failed calls included; "offline" only when none were made."""
    roles = cost.get("roles", {})
    calls = sum(c.get("calls", 0) for c in roles.values())
    if not calls:
        return "cost: no model calls (offline)"
    failed = sum(c.get("failed_calls", 0) for c in roles.values())
    per_role = ", ".join(
        f"{role} {plural(c['calls'], 'call')}"
        + (f" ({c['failed_calls']} failed)" if c.get("failed_calls") else "")
        + f"/{c['input_tokens'] + c['output_tokens']} tok"
        for role, c in roles.items()
    )
    failed_text = f", {failed} failed" if failed else ""
    return (
        f"cost: ${cost.get('cost_usd', 0):.4f}, {cost.get('tokens', 0)} tokens in "
        f"{plural(calls, 'model call')}{failed_text} "
        f"({cost.get('cache_hit_share', 0):.0%} of input from cache); " + per_role
    )
