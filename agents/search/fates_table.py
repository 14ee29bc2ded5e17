"""The candidates' fates as a short table for `optimize` and `bench --optimize`.

Why: the result names only the winner, so the table says, for each candidate, which pass or
plan made it, its verdict, its error over the float64 band, its time, how it compared with
the best so far and the reference, and why it was not chosen. The chosen row's figures are
the result's own (its confirming run), so the one speedup a result reports appears once."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.table import Table

from agents.display import format_ms, shorten
from agents.search.fates import CandidateFate, Fate, fates_summary

COLUMNS = ("pass/plan", "verdict", "error/band", "time ms", "vs best", "vs ref", "why")
WHY_CHARS = 100
MAX_ROWS = 20
VERDICT_WORDS = {"no_code": "no code", "not_judged": "not judged"}
LEGEND = (
    "error/band: the error against float64 over the allowed band (<= 1 passes); vs best: "
    "speed over the best verified kernel before it; vs ref: over the reference"
)


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "–"


def fate_cells(fate: CandidateFate) -> list[str]:
    """One candidate's cells, in COLUMNS order."""
    name = fate.method or shorten(fate.plan, 40)
    if fate.sample:
        name += f" #{fate.sample + 1}"
    if fate.repair:
        name += f" (repair {fate.repair})"
    if fate.iteration > 1:
        name += f" [iteration {fate.iteration}]"
    reason = fate.reason.removeprefix(f"{fate.method}: ")  # a pass's refusal names it
    why = fate.fate.words + (f": {reason}" if reason else "")
    return [
        name,
        VERDICT_WORDS.get(fate.verdict, fate.verdict.replace("_", " ")),
        f"{fate.error_ratio:.2g}" if fate.error_ratio is not None else "–",
        format_ms(fate.time_ms) if fate.time_ms is not None else "–",
        _x(fate.vs_best),
        _x(fate.vs_reference),
        shorten(why, WHY_CHARS),
    ]


def shown(fates: Sequence[CandidateFate], limit: int) -> list[CandidateFate]:
    """At most `limit` candidates, in the order they were made, the chosen one always among
    them: a search of hundreds still prints a table a person reads."""
    if len(fates) <= limit:
        return list(fates)
    keep = {i for i, f in enumerate(fates) if f.fate is Fate.CHOSEN}
    keep |= set(range(len(fates))[: max(0, limit - len(keep))])
    return [f for i, f in enumerate(fates) if i in keep]


def fates_table(
    groups: Iterable[tuple[str, Sequence[CandidateFate]]],
    *,
    title: str,
    problems: bool = False,
    limit: int = MAX_ROWS,
) -> Table:
    """A table of (problem, fates) groups, at most `limit` rows each (`--json` has them all);
    `problems` adds the problem's column (bench)."""
    table = Table(title=title, title_justify="left", caption=LEGEND, caption_justify="left")
    for header in ("problem", *COLUMNS) if problems else COLUMNS:
        table.add_column(header, overflow="fold")
    for problem, fates in groups:
        rows = shown(fates, limit)
        for fate in rows:
            table.add_row(*([problem] if problems else []), *fate_cells(fate))
        if len(rows) < len(fates):
            more = f"… {len(fates) - len(rows)} more (--json lists every candidate)"
            table.add_row(*([problem] if problems else []), more, *[""] * (len(COLUMNS) - 1))
    return table


def fates_title(fates: Sequence[CandidateFate]) -> str:
    """The table's title: the summary line, and whether any candidate was offered."""
    summary = fates_summary(fates) or "no candidates"
    offered = any(f.fate is Fate.CHOSEN for f in fates)
    return summary + ("" if offered else " (none offered)")
