"""The CLI's view of a search's event stream: one rich progress line plus notable events.

Titles and reasons are shortened at a word and never inside an open parenthesis
(agents.display.shorten), and verdicts are said in words: the search's internal names
(`no_code`, `compile_error`) are for logs and JSON, not for the person watching.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from agents.display import plural, shorten
from agents.search import events as ev

TITLE_CHARS = 60
REASON_CHARS = 120
VERDICT_WORDS = {
    "no_code": "nothing to rewrite",
    "compile_error": "compile error",
    "runtime_error": "runtime error",
    "timeout": "timed out",
}
"""How a verdict reads in a progress line; the others ("incorrect", "rejected") are words."""


def verdict_words(verdict: str) -> str:
    return VERDICT_WORDS.get(verdict, verdict.replace("_", " "))


class ProgressView:
    """Shows iteration, best speedup and candidates; prints new bests and failures."""

    def __init__(self, console: Console, iterations: int, max_evals: int | None) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.max_evals = max_evals
        self.iterations = iterations
        self.task: TaskID | None = None
        self.best = 1.0
        self.candidates = 0
        self.iteration = 0
        self.phase = "starting"
        self.detail = ""  # the running evaluation's phase, within self.phase

    def __enter__(self) -> ProgressView:
        self.progress.__enter__()
        total = self.max_evals or self.iterations
        self.task = self.progress.add_task("optimizing", total=total, status="starting")
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def __call__(self, event: ev.SearchEvent) -> None:
        if isinstance(event, ev.Profiled):
            self.console.print(
                "[bold]profile[/bold] " + escape(event.summary).replace("\n", "\n  ")
            )
        elif isinstance(event, ev.PhaseStarted):
            if event.phase:
                self.phase = event.phase
            self.detail = event.detail
        elif isinstance(event, ev.IterationStarted):
            self.iteration = event.iteration
        elif isinstance(event, ev.CandidateEvaluated):
            if event.verdict != "duplicate":
                self.candidates += 1
            if event.verdict not in ("correct", "duplicate"):
                self.console.print(f"  [dim]{escape(failure_line(event))}[/dim]")
        elif isinstance(event, ev.NewBest):
            self.best = event.speedup
            self.console.print(
                f"  [green]new best {event.speedup:.2f}x[/green] "
                f"({escape(shorten(event.plan, TITLE_CHARS))}) "
                f"after {plural(event.evaluations, 'evaluation')}"
            )
        elif isinstance(event, ev.Failed):
            self.console.print(f"[red]failed:[/red] {escape(event.reason)}")
        if self.task is not None:
            done = self.candidates if self.max_evals else self.iteration
            self.progress.update(self.task, completed=done, status=self.status())

    def status(self) -> str:
        """ "iteration 1/6 · evaluating 3 candidates · best 1.00x · 2 candidates": where the
        search is and what it does now, never a bare counter."""
        where = f"iteration {self.iteration}/{self.iterations}" if self.iteration else ""
        found = f"best {self.best:.2f}x · {plural(self.candidates, 'candidate')}"
        return " · ".join(part for part in (where, self.phase, self.detail, found) if part)


def failure_line(event: ev.CandidateEvaluated) -> str:
    """A candidate that failed, e.g. "Fuse bias and scaling into the GEMM… → nothing to
    rewrite: no hand-written softmax…"."""
    line = f"{shorten(event.plan, TITLE_CHARS)} → {verdict_words(event.verdict)}"
    if event.reason:
        line += f": {shorten(event.reason, REASON_CHARS)}"
    return line
