"""What an optimisation works on: a problem in KernelBench form, and where it came from.

An editor target (a Triton launcher, a plain function, a CUDA extension) is optimised as a
problem synthesised around it; `original` keeps the text it came from, so the result can be
written back into that file rather than into the synthesised one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agents.request.settings import RequestError
from agents.task import SourceFile, TaskLoadError, outline_problem

TARGET_KINDS = ("module", "function", "triton", "cuda")


@dataclass(frozen=True)
class Target:
    """The problem to optimise (`problem`, a KernelBench-format file with a Model), the name
    a search and its memory know it by, its kind, and the source it was synthesised from
    (None when `problem` is the user's own file)."""

    problem: SourceFile
    name: str
    kind: str = "module"
    original: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in TARGET_KINDS:
            raise RequestError(
                f"unknown target kind {self.kind!r}: use one of {', '.join(TARGET_KINDS)}"
            )

    @property
    def synthesized(self) -> bool:
        return self.original is not None and self.original != self.problem.text


def load_target(path: str | Path) -> Target:
    """A whole file as the problem (kind "module"), checked for a Model without running it;
    RequestError in one line for a file that cannot be read or is not a problem."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RequestError(f"cannot read {file}: {error}") from None
    problem = SourceFile(text, str(file))
    try:
        outline_problem(problem)
    except TaskLoadError as error:
        raise RequestError(str(error)) from None
    return Target(problem=problem, name=file.stem)
