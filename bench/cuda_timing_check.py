"""Does timing from outside the process agree with CUDA events inside it? (issues 3 and 18)

The verifier now times each call from the parent: a request to the worker, the reply once
the output is complete and checksummed, the parent's clock around it, less what a request
costs besides the call (measured on the reference). This script puts that figure beside the
one KernelBench would report, per problem at GPU size:

- `outside_ms`: the eager model against itself (A/A) through `evaluate`, median of the
  reference side; `aa`: that evaluation's speedup (should be 1);
- `events_ms`: the same model in this process, timed with CUDA events around each call after
  a 256 MB L2 flush, median of 100 calls (KernelBench's method);
- `ratio`: outside_ms / events_ms.

Usage: python bench/cuda_timing_check.py OUT.json [PROBLEM.py ...]  (default: every problem
in bench/problems). Rows are written as they finish, so a cut run keeps what it measured.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

from agents.bench.suite import baseline_candidate
from agents.evaluate import EvalOptions, evaluate
from agents.task import SourceFile, apply_size, build_model, call_factory, load_problem

ROOT = Path(__file__).resolve().parent
L2_FLUSH_BYTES = 256 * 1024 * 1024


def events_ms(path: Path, calls: int = 100, warmup: int = 5) -> float:
    """KernelBench's way: events around each call, an L2 flush before it, the median."""
    source = SourceFile.from_path(path)
    problem = load_problem(source)
    apply_size(problem, "gpu", source)
    torch.manual_seed(0)
    init = call_factory(problem.get_init_inputs, source, "get_init_inputs")
    model = build_model(problem.model_class, init, source).cuda()
    inputs = [
        x.cuda() if isinstance(x, torch.Tensor) else x
        for x in call_factory(problem.get_inputs, source, "get_inputs")
    ]
    flush = torch.empty(L2_FLUSH_BYTES // 4, device="cuda")
    times = []
    with torch.no_grad():
        for index in range(warmup + calls):
            flush.zero_()
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            model(*inputs)
            end.record()
            torch.cuda.synchronize()
            if index >= warmup:
                times.append(start.elapsed_time(end))
    del model, inputs, flush
    torch.cuda.empty_cache()
    return statistics.median(times)


def outside(path: Path) -> dict:
    reference = SourceFile.from_path(path)
    candidate = baseline_candidate(reference, "eager")
    options = EvalOptions(device="cuda", size="gpu", timing_budget_s=3.0, static_check=False)
    result = evaluate(reference, candidate, options)
    return {
        "verdict": result.verdict.value,
        "outside_ms": result.reference_ms,
        "aa": result.speedup,
        "runs": result.timing_runs,
        "elapsed_s": result.elapsed_s,
        "phase_s": result.phase_s,
        "reasons": result.reasons,
    }


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    paths = [Path(p) for p in argv[1:]] or sorted((ROOT / "problems").glob("*.py"))
    rows = json.loads(out.read_text())["rows"] if out.exists() else []
    done = {row["problem"] for row in rows}
    for path in paths:
        if path.stem in done:
            continue
        started = time.monotonic()
        row = {"problem": path.stem, **outside(path)}
        row["events_ms"] = events_ms(path)
        if row["outside_ms"]:
            row["ratio"] = row["outside_ms"] / row["events_ms"]
        row["wall_s"] = round(time.monotonic() - started, 1)
        rows.append(row)
        out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=2))
        print(
            f"{row['problem']:36} {row['verdict']:9} outside {row['outside_ms'] or 0:9.4f} ms "
            f"events {row['events_ms']:9.4f} ms ratio {row.get('ratio', 0):6.3f} "
            f"A/A {row['aa'] or 0:6.3f} verdict in {row['elapsed_s']:.1f} s",
            flush=True,
        )
    ratios = [row["ratio"] for row in rows if row.get("ratio")]
    if ratios:
        print(f"median ratio outside/events: {statistics.median(ratios):.3f} over {len(ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
