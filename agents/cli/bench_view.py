"""`bench`'s progress line: which problem, which stage, never a bare "0/6".

"3/6 · 51_Gemm_Tanh… · baseline: correctness 2/5": the problem's place and name, then what
it does now (a baseline's verification phase, the search's iteration and phase, the
head-to-head). Phases arrive from evaluation threads; rich's Progress takes updates from any
thread.
"""

from __future__ import annotations

from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from agents.display import make_console, shorten

NAME_CHARS = 40
PHASE_CHARS = 70


def progress_bar() -> Progress:
    """The one progress bar `bench` draws, on stderr, gone when the run ends."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=make_console(stderr=True),
        transient=True,
    )


class BenchView:
    """The bar over problems finished, described by the running problem and its phase."""

    def __init__(self, total: int, label: str) -> None:
        self.total = total
        self.label = label
        self.progress = progress_bar()
        self.task: TaskID | None = None
        self.index = 0
        self.name = ""

    def __enter__(self) -> BenchView:
        self.progress.__enter__()
        self.task = self.progress.add_task(self.label, total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def start(self, index: int, name: str) -> None:
        """Problem `index` (0-based) begins."""
        self.show(index, name, "starting")

    def show(self, index: int, name: str, phase: str) -> None:
        self.index, self.name = index, name
        if self.task is None:
            return
        text = (
            f"{index + 1}/{self.total} · {shorten(name, NAME_CHARS)} · "
            f"{shorten(phase, PHASE_CHARS)}"
        )
        self.progress.update(self.task, description=text)

    def phase(self, phase: str) -> None:
        """The running problem's phase changed."""
        self.show(self.index, self.name, phase)

    def finished(self) -> None:
        """The running problem's row is in."""
        if self.task is not None:
            self.progress.update(self.task, advance=1)
