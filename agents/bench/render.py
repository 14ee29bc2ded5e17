"""A benchmark report as a rich table, and as a plot of speedup per problem."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from agents.bench.report import FAST_P_THRESHOLDS, RULES, BenchReport


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def render_report(report: BenchReport, console: Console) -> None:
    table = Table(
        title=f"{report.baseline_label()} vs eager on {report.machine} "
        f"({report.device}, size {report.size})"
    )
    for column in ("problem", "verdict", "strict", "eager ms", "baseline ms", "speedup"):
        table.add_column(column, justify="left" if column in ("problem", "verdict") else "right")
    for row in report.rows:
        speedup = "" if row.speedup is None else f"{row.speedup:.2f}x"
        if row.speedup is not None and not row.timing_stable:
            speedup = "unstable"
        strict = {True: "pass", False: "fail", None: ""}[row.strict_allclose]
        table.add_row(
            row.problem, row.verdict, strict, _ms(row.eager_ms), _ms(row.baseline_ms), speedup
        )
    console.print(table)
    for rule in RULES:
        parts = [f"fast_{p:g} {report.fast_p(p, rule):.0%}" for p in FAST_P_THRESHOLDS]
        mean = report.geomean_speedup(rule)
        geo = f"{mean:.2f}x" if mean else "n/a"
        console.print(f"{rule:>8} rule: " + ", ".join(parts) + f"; geomean speedup {geo}")
    for row in report.rows:  # why a row has no figures, next to the table that lacks them
        if row.verdict == "error":
            console.print(f"{row.problem}: error: {'; '.join(row.reasons)}", markup=False)
    console.print(f"{len(report.rows)} problems in {report.total_s:.0f} s")


def plot_report(report: BenchReport, path: Path) -> None:
    """Bar chart of each problem's speedup over eager (eager = 1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report.rows
    names = [row.problem for row in rows]
    values = [row.speedup or 0.0 for row in rows]
    colours = ["tab:green" if row.verdict == "correct" else "tab:red" for row in rows]
    figure, axis = plt.subplots(figsize=(max(6, 0.45 * len(rows)), 4.5))
    axis.bar(range(len(rows)), values, color=colours)
    axis.axhline(1.0, color="black", linewidth=1, label="eager")
    axis.set_xticks(range(len(rows)), names, rotation=70, ha="right", fontsize=7)
    axis.set_ylabel("speedup over eager")
    axis.set_yscale("log")
    axis.set_title(f"{report.baseline_label()} vs eager: {report.machine} ({report.device})")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def markdown_report(report: BenchReport) -> str:
    """The report as a Markdown section for bench/RESULTS.md: date, machine, command, table."""
    lines = [
        f"- Date: {report.date}; machine: {report.machine} ({report.device}, size "
        f"{report.size}); {len(report.rows)} problems in {report.total_s:.0f} s.",
        f"- Command: `{report.command}`",
        "",
        "| problem | verdict | strict | eager ms | baseline ms | speedup | 95% CI |",
        "| --- | --- | --- | ---: | ---: | ---: | --- |",
    ]
    for row in report.rows:
        strict = {True: "pass", False: "fail", None: ""}[row.strict_allclose]
        speedup = f"{row.speedup:.2f}x" if row.speedup else ""
        interval = f"{row.speedup_ci[0]:.2f}-{row.speedup_ci[1]:.2f}" if row.speedup_ci else ""
        if row.speedup and not row.timing_stable:  # the load set the ratio: no number
            speedup, interval = "unstable", row.unstable_reason.replace("|", "/")
        lines.append(
            f"| {row.problem} | {row.verdict} | {strict} | {_ms(row.eager_ms)} | "
            f"{_ms(row.baseline_ms)} | {speedup} | {interval} |"
        )
    lines.append("")
    for rule in RULES:
        parts = [f"fast_{p:g} {report.fast_p(p, rule):.0%}" for p in FAST_P_THRESHOLDS]
        mean = report.geomean_speedup(rule)
        geomean = f"; geomean {mean:.2f}x" if mean else "; geomean n/a"
        lines.append(f"- {rule} rule: " + ", ".join(parts) + geomean)
    return "\n".join(lines)
