"""How large each problem's GEMMs are: M·N·K summed over its matrix products (batch included).

Why: the GEMM shape-class check (bench/gpu_checks.sh h) holds the triton-gemm pass to its target
only where the products are large (M·N·K ≥ 2^33); the size is read off the problem itself, not
off its file name. The model is built and run on the meta device under torch's FLOP counter, so
nothing is allocated and no arithmetic runs: the bench's own problems, trusted code.

Usage: python bench/gemm_sizes.py OUT.json PROBLEM.py ...
Writes {"problem": {"mnk": int, "log2": float}}, or {"problem": {"error": "..."}}.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from agents.task import SourceFile, build_model, call_factory, load_problem

GEMM_OPS = ("mm", "addmm", "bmm", "baddbmm")


def gemm_mnk(path: Path) -> int:
    """Sum of M·N·K over the forward's matrix products (each costs 2·M·N·K FLOPs)."""
    source = SourceFile.from_path(path)
    problem = load_problem(source)
    with torch.device("meta"):
        init = call_factory(problem.get_init_inputs, source, "get_init_inputs")
        model = build_model(problem.model_class, init, source)
        inputs = call_factory(problem.get_inputs, source, "get_inputs")
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(*inputs)
    per_op = counter.get_flop_counts().get("Global", {})
    flops = sum(n for op, n in per_op.items() if str(op).split(".")[-1] in GEMM_OPS)
    return int(flops // 2)


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: python bench/gemm_sizes.py OUT.json PROBLEM.py ...", file=sys.stderr)
        return 2
    sizes = {}
    for name in argv[2:]:
        path = Path(name)
        try:
            mnk = gemm_mnk(path)
        except Exception as error:  # one problem's failure is its row, never the whole run's
            sizes[path.stem] = {"error": f"{type(error).__name__}: {error}"[:300]}
            continue
        sizes[path.stem] = {"mnk": mnk, "log2": round(math.log2(mnk), 2) if mnk else None}
    Path(argv[1]).write_text(json.dumps(sizes, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
