"""Does our CUDA timing agree with a plain CUDA-event loop? (issue 3's check on three problems)

For each problem at GPU size: our timer (`agents.verify.timing.measure_pair`, events with an
L2 flush per trial, first trial discarded, adaptive stop) timing the eager model against
itself, and a plain loop (events around each of 100 calls, no flush). Prints a table and
writes JSON. Usage: python bench/cuda_timing_check.py [OUT.json] [PROBLEM.py ...]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch

from agents.task import SourceFile, apply_size, build_model, call_factory, load_problem
from agents.verify.timing import TimingConfig, measure_pair

ROOT = Path(__file__).resolve().parent
DEFAULT_PROBLEMS = ["01_matmul.py", "08_gelu.py", "21_residual_conv_block.py"]


def plain_event_loop(call, trials: int = 100, warmup: int = 3) -> float:
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def check(path: Path) -> dict:
    source = SourceFile.from_path(path)
    problem = load_problem(source)
    apply_size(problem, "gpu", source)
    torch.manual_seed(0)
    model = build_model(
        problem.model_class, call_factory(problem.get_init_inputs, source, "i"), source
    ).cuda()
    inputs = [
        x.cuda() if isinstance(x, torch.Tensor) else x
        for x in call_factory(problem.get_inputs, source, "get_inputs")
    ]

    def call():
        with torch.no_grad():
            return model(*inputs)

    ours = measure_pair(call, call, "cuda", TimingConfig(budget_s=10.0))
    plain = plain_event_loop(call)
    return {
        "problem": path.stem,
        "ours_ms": ours.reference.median_ms,
        "ours_aa_ratio": ours.speedup,
        "plain_ms": plain,
        "ours_over_plain": ours.reference.median_ms / plain,
        "runs": ours.runs,
    }


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else None
    names = argv[1:] or DEFAULT_PROBLEMS
    rows = [check(ROOT / "problems" / name) for name in names]
    print(f"{'problem':32} {'ours ms':>10} {'plain ms':>10} {'ours/plain':>10} {'A/A':>6}")
    for row in rows:
        print(
            f"{row['problem']:32} {row['ours_ms']:10.4f} {row['plain_ms']:10.4f} "
            f"{row['ours_over_plain']:10.3f} {row['ours_aa_ratio']:6.3f}"
        )
    if out:
        out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
