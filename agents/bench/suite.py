"""Which problem files a benchmark runs, and the baseline candidates it builds from them.

A folder is read as it is: our own `bench/problems/`, or a KernelBench checkout (its
`level1/`, `level2/`... folders, at the top or under `KernelBench/`), unchanged.
"""

from __future__ import annotations

import re
from pathlib import Path

from agents.task import SourceFile, TaskLoadError, outline_problem

LEVEL = re.compile(r"level\d+$")


def discover(root: Path, levels: list[int] | None = None) -> list[Path]:
    """Problem files under root, in a stable order (numeric prefix first)."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise TaskLoadError(f"{root}: no such file or folder")
    level_dirs = sorted(
        (
            d
            for base in (root, root / "KernelBench")
            if base.is_dir()
            for d in base.iterdir()
            if d.is_dir() and LEVEL.match(d.name)
        ),
        key=lambda d: int(d.name[5:]),
    )
    if levels:
        level_dirs = [d for d in level_dirs if int(d.name[5:]) in levels]
    folders = level_dirs or [root]
    files = [f for folder in folders for f in sorted(folder.glob("*.py"), key=_order)]
    return [f for f in files if not f.name.startswith("_")]


def _order(path: Path) -> tuple[int, str]:
    match = re.match(r"(\d+)", path.name)
    return (int(match.group(1)) if match else 10**9, path.name)


def problem_name(path: Path) -> str:
    parent = path.parent.name
    return f"{parent}/{path.stem}" if LEVEL.match(parent) else path.stem


COMPILE_BASELINE = """

# --- kernel-agent baseline: the reference compiled by TorchInductor ---
class ModelNew(Model):
    def __init__(self, *args, **kwargs):
        import torch._inductor.config

        super().__init__(*args, **kwargs)
        # Random ops (dropout in training mode) draw eager's numbers, as the verifier seeds
        # both sides alike; else every model with dropout would count as compile's error.
        torch._inductor.config.fallback_random = True
        self._compiled_forward = torch.compile(super().forward)

    def forward(self, *args):
        return self._compiled_forward(*args)
"""

AUTOTUNE_BASELINE = COMPILE_BASELINE.replace(
    "TorchInductor ---", "TorchInductor, max-autotune ---"
).replace(
    "torch.compile(super().forward)",
    # Not plain "max-autotune": its CUDA graph trees reuse output memory on the next call.
    'torch.compile(super().forward, mode="max-autotune-no-cudagraphs")',
)

EAGER_BASELINE = """

# --- kernel-agent baseline: the reference itself (an A/A check of the timing) ---
class ModelNew(Model):
    pass
"""

BASELINES = ("torch.compile", "torch.compile max-autotune", "eager")
SUFFIXES = {
    "torch.compile": COMPILE_BASELINE,
    "torch.compile max-autotune": AUTOTUNE_BASELINE,
    "eager": EAGER_BASELINE,
}


def baseline_candidate(reference: SourceFile, baseline: str) -> SourceFile:
    """A trusted, generated candidate: the reference itself under a baseline compiler."""
    outline_problem(reference)
    if baseline not in BASELINES:
        raise TaskLoadError(f"unknown baseline {baseline!r}: use one of {', '.join(BASELINES)}")
    text = reference.text
    if not re.search(r"^import torch$", text, re.M):
        text = "import torch\n" + text
    label = f"{reference.label} [{baseline}]"
    return SourceFile(text=text + SUFFIXES[baseline], path=label)
