"""How often the verifier reports an A/A copy as a number outside the band, beside busy loops.

An A/A copy is the reference's own code as the candidate (`baseline_candidate`): any ratio
beyond 1.2x it is reported as a *stable* number is the load's, not the code's. Each run is a
fresh verdict (`tests/conftest.run_eval`'s path: `evaluate`, jail on, static check off) of
tests/problems/linear_relu.py against itself with the timing budget the A/A test uses (0.3 s),
beside one `while True: pass` per CPU (or --busy N).

    python bench/aa_under_load.py OUT.json [--runs N] [--busy N] [--problem P.py] [--budget S]

Prints one line per run and a summary; writes every run to OUT.json (rerunning appends).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> int:
    from agents.bench.suite import baseline_candidate
    from agents.evaluate import EvalOptions, evaluate
    from agents.task import SourceFile
    from agents.verify.stability import BAND

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--problem", type=Path, default=ROOT / "tests/problems/linear_relu.py")
    parser.add_argument("--budget", type=float, default=0.3)
    args = parser.parse_args(argv)
    reference = SourceFile.from_path(args.problem)
    itself = baseline_candidate(reference, "eager")
    options = EvalOptions(static_check=False, threads=1, timing_budget_s=args.budget)
    rows = json.loads(args.out.read_text()) if args.out.exists() else []
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        for index in range(args.runs):
            started = time.monotonic()
            result = evaluate(reference, itself, options)
            row = {
                "speedup": result.speedup,
                "stable": result.timing_stable,
                "reason": result.timing_unstable_reason,
                "verdict": result.verdict.value,
                "wall_s": round(time.monotonic() - started, 2),
                "waits": [n for n in result.timing_notes if n.startswith("waited for a CPU")],
            }
            rows.append(row)
            args.out.write_text(json.dumps(rows, indent=1))
            print(
                index,
                f"{row['speedup'] or 0:.2f}x",
                "stable" if row["stable"] else "unstable",
                row["reason"][:120],
                flush=True,
            )
    finally:
        for process in busy:
            process.kill()
            process.wait()
    numbers = [r for r in rows if r["stable"] and r["speedup"]]
    outside = [r for r in numbers if not 1 / BAND <= r["speedup"] <= BAND]
    print(
        f"{len(rows)} runs: {len(numbers)} reported as a number, {len(outside)} of them outside"
        f" {1 / BAND:.2f}-{BAND:.2f}x; {len(rows) - len(numbers)} unstable"
    )
    return 1 if outside else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
