"""What can be optimised in a file, as plain values: a target and the kernels it runs.

Lines are 0-based: the editor turns them into its own ranges, the command line names them
to the user one-based.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MODULE_BASES = {"nn.Module", "torch.nn.Module", "Module"}
HARNESS = ("get_inputs", "get_init_inputs")
TRITON_DECORATORS = ("jit", "autotune", "heuristics")


@dataclass(frozen=True)
class Kernel:
    """A Triton or CUDA kernel a target runs; lines are 0-based in the document."""

    name: str
    language: str  # "triton" | "cuda" | "cpp" (a C++ extension, no kernel lines)
    start_line: int
    end_line: int


@dataclass(frozen=True)
class Target:
    """One optimisable thing. Lines are 0-based and inclusive; `name_line` is where its
    `class`/`def` keyword sits (code lenses go there)."""

    name: str
    kind: str  # "module" | "triton" | "cuda" | "function" (calls a C++ extension)
    start_line: int
    end_line: int
    name_line: int
    start_byte: int
    end_byte: int
    kernels: tuple[Kernel, ...] = ()
    missing: str | None = None  # one line: what to add before it can be optimised
    snippet: str | None = None  # the code to add, ready to paste
    params: tuple[str, ...] = field(default=(), compare=False)  # a function target's params

    @property
    def ready(self) -> bool:
        return self.missing is None

    @property
    def label(self) -> str:
        return {"triton": "Triton kernel", "cuda": "CUDA kernel"}.get(self.kind, "kernel")

    def covers(self, line: int) -> bool:
        """Whether a cursor on `line` is on this target or one of its kernels."""
        if self.start_line <= line <= self.end_line:
            return True
        return any(k.start_line <= line <= k.end_line for k in self.kernels)
