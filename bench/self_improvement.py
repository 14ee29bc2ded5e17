"""Does the memory make the search cheaper? Run the suite twice through the search: first
with a cold (empty) memory, then with the memory the first pass left behind, and report the
evaluations each needed to reach its best speedup, and the seconds the triton-gemm pass's
kernels spent compiling and autotuning on their first calls (a warm run reuses the winning
tiles memory/tuning.py kept, so it compiles one config per GEMM site).

    python bench/self_improvement.py [bench/problems] [--start S] [--limit N] [--out results.json]
    python bench/self_improvement.py --device cuda --only 01,09,10,15,19   # GEMM-bound, on a GPU

Uses the offline backend (the only one that runs without an endpoint here); `--backend`
(or its old name `--llm`), `--model` and `--base-url` pick another. Each problem is one
`OptimizeRequest` run by agents/request/run.py, as `kernel-agent optimize` runs it. Speeds
are the search's own confirmed figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.bench.runner import machine_name
from agents.bench.suite import discover, problem_name
from agents.llm.config import BACKENDS
from agents.request.defaults import BENCH_MAX_EVALS, DEVICES, SELF_IMPROVEMENT_TIMING_BUDGET_S
from agents.request.requests import OptimizeRequest
from agents.request.run import open_search
from agents.request.settings import BudgetSettings, EvaluationSettings, LLMSettings, MemorySettings
from agents.request.target import Target
from agents.task import SourceFile


def one(path: Path, memory_path: Path, args, evaluation: EvaluationSettings) -> dict:
    request = OptimizeRequest(
        Target(SourceFile.from_path(path), problem_name(path)),
        budget=BudgetSettings(max_evals=args.max_evals),
        evaluation=evaluation,
        llm=LLMSettings(backend=args.backend, model=args.model, base_url=args.base_url),
        memory=MemorySettings(path=memory_path),
    )
    with open_search(request) as job:
        result = job.run()
        tuning_s = getattr(job.roles.executor, "tuning_s", 0.0)  # the offline executor's count
    return {
        "problem": problem_name(path),
        "verdict": result.verdict,
        "speedup": result.speedup,
        "best_in_search": max((p.best_speedup for p in result.trajectory), default=1.0),
        "evaluations": result.evaluations,
        "evaluations_to_best": result.evaluations_to_best(),
        "methods": result.methods,
        "elapsed_s": result.elapsed_s,
        "tuning_s": round(tuning_s, 2),
    }


def run_pass(paths, memory_path: Path, args, evaluation: EvaluationSettings) -> list[dict]:
    rows = []
    for path in paths:
        row = one(path, memory_path, args, evaluation)
        print(
            f"  {row['problem']}: {row['verdict']} {row['speedup']:.2f}x, "
            f"{row['evaluations_to_best']} evaluations to best of {row['evaluations']}, "
            f"{row['tuning_s']:.1f} s tuning",
            file=sys.stderr,
        )
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default="bench/problems")
    parser.add_argument("--start", type=int, default=0, help="skip the first N problems")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--backend", "--llm", default="offline", choices=BACKENDS)
    parser.add_argument("--model", default=None)
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--timing-budget", type=float, default=SELF_IMPROVEMENT_TIMING_BUDGET_S)
    parser.add_argument("--max-evals", type=int, default=BENCH_MAX_EVALS)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--device", default="cpu", choices=DEVICES)
    parser.add_argument(
        "--only", default=None, help="comma-separated problem number prefixes, e.g. 01,09,10"
    )
    args = parser.parse_args()
    if args.device == "cuda" and not _cuda_available():
        print(
            "self_improvement: --device cuda needs a CUDA GPU, and none is visible", file=sys.stderr
        )
        return 2
    paths = discover(Path(args.path))
    if args.only:
        prefixes = tuple(f"{p.strip()}_" for p in args.only.split(",") if p.strip())
        paths = [p for p in paths if p.name.startswith(prefixes)]
    paths = paths[args.start :][: args.limit]
    evaluation = EvaluationSettings(
        device=args.device, threads=args.threads, timing_budget=args.timing_budget
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        memory_path = Path(scratch) / "memory.sqlite3"
        print("cold memory:", file=sys.stderr)
        cold = run_pass(paths, memory_path, args, evaluation)
        print("warm memory:", file=sys.stderr)
        warm = run_pass(paths, memory_path, args, evaluation)
    pairs = [
        (c, w)
        for c, w in zip(cold, warm, strict=True)
        if c["evaluations_to_best"] is not None and w["evaluations_to_best"] is not None
    ]
    report = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine_name(args.device),
        "device": args.device,
        "command": "python " + " ".join(sys.argv),
        "llm": args.backend,
        "cold": cold,
        "warm": warm,
        "improved_both": len(pairs),
        "evaluations_to_best_cold": sum(c["evaluations_to_best"] for c, _ in pairs),
        "evaluations_to_best_warm": sum(w["evaluations_to_best"] for _, w in pairs),
        "evaluations_cold": sum(r["evaluations"] for r in cold),
        "evaluations_warm": sum(r["evaluations"] for r in warm),
        "tuning_s_cold": round(sum(r["tuning_s"] for r in cold), 2),
        "tuning_s_warm": round(sum(r["tuning_s"] for r in warm), 2),
        "median_ratio_warm_over_cold": (
            statistics.median(w["evaluations_to_best"] / c["evaluations_to_best"] for c, w in pairs)
            if pairs
            else None
        ),
        "geomean_speedup_cold": _geomean([r["speedup"] for r in cold]),
        "geomean_speedup_warm": _geomean([r["speedup"] for r in warm]),
        "total_s": round(time.monotonic() - started, 1),
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(markdown(report))
    return 0


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 1.0


def markdown(report: dict) -> str:
    lines = [
        f"- Date: {report['date']}; machine: {report['machine']}; backend: {report['llm']}; "
        f"{report['total_s']:.0f} s.",
        f"- Command: `{report['command']}`",
        "",
        "| problem | cold: to best / evals | cold speedup | cold tuning s "
        "| warm: to best / evals | warm speedup | warm tuning s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c, w in zip(report["cold"], report["warm"], strict=True):
        lines.append(
            f"| {c['problem']} | {c['evaluations_to_best'] or '-'} / {c['evaluations']} | "
            f"{c['speedup']:.2f}x | {c.get('tuning_s', 0.0):.1f} | "
            f"{w['evaluations_to_best'] or '-'} / {w['evaluations']} | "
            f"{w['speedup']:.2f}x | {w.get('tuning_s', 0.0):.1f} |"
        )
    lines += [
        "",
        f"- Evaluations to reach the best, summed over the {report['improved_both']} problems "
        f"improved in both passes: cold {report['evaluations_to_best_cold']}, warm "
        f"{report['evaluations_to_best_warm']} (median warm/cold ratio "
        f"{report['median_ratio_warm_over_cold']}).",
        f"- All evaluations: cold {report['evaluations_cold']}, warm {report['evaluations_warm']}"
        f"; geomean speedup cold {report['geomean_speedup_cold']:.2f}x, warm "
        f"{report['geomean_speedup_warm']:.2f}x.",
        f"- Seconds the triton-gemm kernels spent compiling and autotuning on their first calls "
        f"in the pass: cold {report.get('tuning_s_cold', 0.0):.1f}, warm "
        f"{report.get('tuning_s_warm', 0.0):.1f}.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
