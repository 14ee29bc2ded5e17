"""Tables for `bench --optimize`: the terminal view and the Markdown for bench/RESULTS.md.

Every ratio is printed with the two medians it divides, from the one run that measured it
("1.14x (2.040/1.790 ms)"; agents.bench.optimize says which run each is), so a ratio is
never read against times from another run; a ratio divided out of two runs says "derived".
Times have four significant digits (agents.display.format_ms), so a ratio is seen to follow
from the times beside it even for microsecond kernels."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from agents.bench.optimize import FAST_P, OptimizeReport, OptimizeRow
from agents.display import format_ms
from agents.search.fates import fates_summary
from agents.search.fates_table import fates_table, fates_title

HEADERS = (
    "problem",
    "verdict",
    "eager ms",
    "compile ms",
    "ours ms",
    "compile/eager",
    "ours/eager",
    "ours/compile",
    "evals",
    "wall s",
    "passes",
)


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value else ""


LEGEND = (
    "each ratio is followed by the two medians it divides, from one run: compile/eager "
    "from the baseline run (the eager and compile ms columns), ours/eager from the search's "
    "confirming run (ours ms), ours/compile from a head-to-head run of ours against "
    "torch.compile; derived: ours/eager ÷ compile/eager, from two runs"
)


def _ms(value: float | None) -> str:
    return format_ms(value) if value is not None else ""


def _ratio(value: float | None, times: list[float] | None, extra: str = "") -> str:
    """ "1.14x (2.040/1.790 ms)": the ratio and the medians it divides; without times (a
    report from before they were kept) the ratio alone."""
    if not value:
        return ""
    inside = [f"{_ms(times[0])}/{_ms(times[1])} ms"] if times and len(times) == 2 else []
    inside += [extra] if extra else []
    return _x(value) + (f" ({'; '.join(inside)})" if inside else "")


def _ours_vs_eager(row: OptimizeRow) -> str:
    if row.verdict == "error":
        return ""
    if row.verdict != "correct":
        return f"{_x(row.speedup)} (original)"  # no kernel found: the original, by definition
    ci = f"CI {row.speedup_ci[0]:.2f}-{row.speedup_ci[1]:.2f}" if row.speedup_ci else ""
    return _ratio(row.speedup, row.speedup_ms, ci)


def _ours_vs_compile(row: OptimizeRow) -> str:
    if row.vs_compile_derived:
        return _ratio(row.vs_compile, None, "derived")
    return _ratio(row.vs_compile, row.vs_compile_ms)


def _cells(row: OptimizeRow) -> list[str]:
    compile_times = [row.eager_ms, row.compile_ms] if row.eager_ms and row.compile_ms else None
    return [
        row.problem,
        row.verdict,
        _ms(row.eager_ms),
        _ms(row.compile_ms) if row.compile_ms else row.compile_verdict,
        _ms(row.agent_ms) if row.verdict == "correct" else "",
        _ratio(row.compile_speedup, compile_times),
        _ours_vs_eager(row),
        _ours_vs_compile(row),
        str(row.evaluations),
        f"{row.wall_s:.0f}",
        " → ".join(row.methods),
    ]


def summary_lines(report: OptimizeReport) -> list[str]:
    s = report.summary()

    def g(key: str) -> str:
        return f"{s[key]:.2f}x" if s[key] else "n/a"

    fast = ", ".join(f"fast_{p:g} {report.fast_p(p):.0%}" for p in FAST_P)
    return [
        f"geomean over eager {g('geomean_vs_eager')}, over torch.compile "
        f"{g('geomean_vs_compile')} (torch.compile over eager {g('geomean_compile_vs_eager')})",
        f"{fast}; {s['improved']} of {s['problems']} improved, {s['errors']} errors, "
        f"{s['slower_than_original']} returned slower than the original",
    ]


def render_optimize(report: OptimizeReport, console: Console) -> None:
    table = Table(title=f"kernel-agent (offline) on {report.machine} ({report.device})")
    for header in HEADERS:
        table.add_column(header, overflow="fold")
    for row in report.rows:
        table.add_row(*_cells(row))
    console.print(table)
    for line in [*summary_lines(report), LEGEND]:
        console.print(line, markup=False)
    groups = [(row.problem, row.candidates) for row in report.rows if row.candidates]
    if groups:
        every = [fate for _, fates in groups for fate in fates]
        console.print(
            fates_table(groups, title=f"the search's {fates_title(every)}", problems=True)
        )
    for row in report.rows:  # why a row has no figures, next to the table that lacks them
        if row.verdict == "error":
            reason = row.error or "; ".join(row.notes) or "no reason recorded"
            console.print(f"{row.problem}: error: {reason}", markup=False)
    console.print(f"{len(report.rows)} problems in {report.total_s:.0f} s; memory: {report.memory}")


def optimize_markdown(report: OptimizeReport) -> str:
    lines = [
        f"- Date: {report.date}; machine: {report.machine} ({report.device}, size "
        f"{report.size}); {len(report.rows)} problems in {report.total_s:.0f} s; memory: "
        f"{report.memory}.",
        f"- Command: `{report.command}`",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "| " + " | ".join("---" for _ in HEADERS) + " |",
    ]
    lines += ["| " + " | ".join(_cells(row)) + " |" for row in report.rows]
    lines.append("")
    lines += [f"- {line}" for line in [*summary_lines(report), LEGEND]]
    lines += [f"- {row.problem}: {note}" for row in report.rows for note in row.notes]
    lines += [
        f"- {row.problem}: the search's {fates_summary(row.candidates)}"
        for row in report.rows
        if row.candidates
    ]
    return "\n".join(lines)
