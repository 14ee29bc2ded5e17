"""What an optimisation works on: a problem in KernelBench form, and where it came from.

An editor target (a Triton launcher, a plain function, a CUDA extension) is optimised as a
problem synthesised around it; `original` keeps the text it came from, so the result can be
written back into that file rather than into the synthesised one. A target named on the
command line (`FILE.py` or `FILE.py::NAME`) is loaded by agents/targets/load.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.request.settings import RequestError
from agents.task import SourceFile

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
