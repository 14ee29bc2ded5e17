"""The contract every rewrite pass keeps.

Passes run only inside the sandbox (they instantiate and trace user code). A pass gets the
current kernel as a `Program` and returns a `Rewrite`: a complete, standalone module that
defines `ModelNew` with the original constructor signature and parameter names (so
checkpoints load), or no source and the reason. A pass is never trusted: the reviewer judges
every output like any candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class PassError(Exception):
    """The pass cannot apply here; the message says why in one line."""


@dataclass
class Program:
    source: str  # the whole module: imports, constants, the class, get_inputs, ...
    class_name: str  # "Model" for the reference, "ModelNew" for an earlier rewrite
    module: Any  # torch.nn.Module, built from init_inputs with its current weights, eval()
    inputs: list[Any]  # example inputs from get_inputs(), on `device`
    init_inputs: list[Any]
    device: str  # "cpu" | "cuda"
    tuning: dict[str, dict[str, int]] = field(default_factory=dict)
    """Remembered tuning choices on this device (memory/tuning.py), "op signature|shape
    class" -> config: a pass that autotunes uses them instead of its table. Empty: tune."""


@dataclass
class Rewrite:
    source: str | None  # complete module defining ModelNew; None: nothing to do here
    summary: str  # what changed, or why nothing did (one line)
    changes: list[str] = field(default_factory=list)  # one line per rewrite site
    method: str = ""  # how: "fx" or "source" (the tree-sitter/ast fallback)
    tuning_sites: tuple[TuningSite, ...] = ()  # the autotuned kernels the source defines


@dataclass(frozen=True)
class TuningSite:
    """An autotuned kernel of a rewrite, and where its winning config is remembered: the
    sandboxed child reads the kernel's choice after its first call (agents/offline/child.py)."""

    kernel: str  # the module-level name of the autotuned kernel
    op_signature: str  # memory.tuning.op_signature
    shape_class: str  # memory.tuning.shape_class
    from_memory: bool  # the kernel's only config came from memory


class RewritePass(Protocol):
    name: str  # the skills' `offline_pass` value, e.g. "equality-saturation"

    def apply(self, program: Program) -> Rewrite: ...
