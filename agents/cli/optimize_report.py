"""What `kernel-agent optimize` prints and writes after a search: the verified kernel to a
file (never over the user's own), the diff, every candidate's fate and the cost.

For FILE.py the file is the search's module (`ModelNew`); for FILE.py::NAME it is FILE.py
with the rewrite added alongside NAME, as the editor's Accept adds it
(agents/targets/write_back.py)."""

from __future__ import annotations

import difflib
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from agents.display import format_ms, plural
from agents.request.settings import RequestError
from agents.request.target import Target
from agents.search.fates_table import fates_table, fates_title
from agents.search.result import SearchResult
from agents.targets.write_back import FileRewrite, rewritten_file


def write_output(
    result: SearchResult, source: Path, wanted: Path | None, request_target: Target
) -> tuple[Path, FileRewrite] | None:
    """Write the verified kernel (and say what it is called there); never over the user's
    own file."""
    if result.source is None:
        return None
    target = wanted or source.with_name(f"{source.stem}_optimized.py")
    if target.resolve() == source.resolve():
        raise RequestError(f"--output {target} is the input file; choose another path")
    # A comment, not a docstring: the module's own docstring must stay its first statement.
    header = (
        f"# Verified by kernel-agent: {result.speedup:.2f}x over {source.name} on "
        f"{result.device} ({', '.join(result.methods) or 'rewrite'}).\n"
    )
    written = rewritten_file(request_target, result)
    body = written.text
    if body.lstrip().startswith("# Verified by kernel-agent"):
        header = ""
    target.write_text(header + body, encoding="utf-8")
    return target, written


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


def report(
    result: SearchResult,
    written: tuple[Path, FileRewrite] | None,
    request_target: Target,
    out: Console,
) -> None:
    if result.improved and written is not None:
        output, rewrite = written
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
            (request_target.original or request_target.problem.text).splitlines(),
            rewrite.text.splitlines(),
            fromfile=request_target.problem.label,
            tofile=str(output),
            lineterm="",
        )
        out.print("\n".join(list(diff)[:80]), markup=False, highlight=False)
        out.print(f"written to {output}")
        if request_target.synthesized and rewrite.call != "ModelNew":
            out.print(
                f"call {rewrite.call}(...) from it in place of {request_target.name}(...)",
                markup=False,
            )
        if rewrite.note:
            out.print(f"note: {rewrite.note}", markup=False)
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
