"""Tables for `bench --optimize`: the terminal view and the Markdown for bench/RESULTS.md."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from agents.bench.optimize import FAST_P, OptimizeReport, OptimizeRow

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


def _ms(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else ""


def _cells(row: OptimizeRow) -> list[str]:
    ours = _x(row.speedup)
    if row.speedup_ci and row.verdict == "correct":
        ours += f" ({row.speedup_ci[0]:.2f}-{row.speedup_ci[1]:.2f})"
    return [
        row.problem,
        row.verdict,
        _ms(row.eager_ms),
        _ms(row.compile_ms) if row.compile_ms else row.compile_verdict,
        _ms(row.agent_ms) if row.verdict == "correct" else "",
        _x(row.compile_speedup),
        ours if row.verdict != "error" else "",
        _x(row.vs_compile),
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
    for line in summary_lines(report):
        console.print(line)
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
    lines += [f"- {line}" for line in summary_lines(report)]
    lines += [f"- {row.problem}: {note}" for row in report.rows for note in row.notes]
    return "\n".join(lines)
