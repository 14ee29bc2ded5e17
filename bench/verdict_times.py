"""Time to a verdict, per phase, on every problem of a suite (issue 22).

For each problem, the eager model against itself (`baseline_candidate`) through `evaluate`,
with the CLI's defaults (timing included, 3 s budget): wall seconds and the verdict's own
per-phase seconds (start, build, run, measure). With --pool, each problem is a search of two
candidates through one `LocalPool`: the second (the same baseline under another source text,
as a search's next candidate is) finds the reference's worker the first left warm
(agents/verify/keeper.py) and a candidate worker booted during the first's build
(agents/verify/spares.py); between problems the pool lets its warm workers go, as a search
does when it ends.

Run it from another checkout to get a "before" (the script only uses `evaluate`):
    PYTHONPATH=/path/to/old python bench/verdict_times.py OUT.json [--pool] [PROBLEM.py ...]
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    from agents.bench.suite import baseline_candidate
    from agents.evaluate import EvalOptions, evaluate
    from agents.task import SourceFile

    out = Path(argv[0])
    pooled = "--pool" in argv
    device = "cuda" if "--cuda" in argv else "cpu"
    paths = [Path(a) for a in argv[1:] if a.endswith(".py")]
    paths = paths or sorted((ROOT / "problems").glob("[0-9]*.py"))
    size = "gpu" if device == "cuda" else "default"
    # a trusted baseline; the budget explicit, so an older checkout times alike
    # A cache of its own: every run starts from no build cache, whatever ran before.
    cache = Path(tempfile.mkdtemp(prefix="verdict-times-"))
    options = EvalOptions(
        device=device, size=size, static_check=False, timing_budget_s=3.0, cache_dir=cache
    )
    rows = []
    pool = None
    if pooled:
        from agents.evalpool import LocalPool

        pool = LocalPool()
    for path in paths:
        reference = SourceFile.from_path(path)
        candidate = baseline_candidate(reference, "eager")
        started = time.monotonic()
        if pool is None:
            result = evaluate(reference, candidate, options)
            rows.append(_row(path, result, time.monotonic() - started, "fresh"))
        else:
            pool.release_warm_workers()  # a new search
            second = SourceFile(candidate.text + "\n# the search's next candidate\n", "next.py")
            for label, source in (("fresh", candidate), ("warm", second)):
                began = time.monotonic()
                result = asyncio.run(pool.submit(reference, source, options))
                rows.append(_row(path, result, time.monotonic() - began, label))
        print(json.dumps(rows[-1]), flush=True)
        out.write_text(json.dumps({"rows": rows}, indent=2))
    if pool is not None:
        pool.close()
    shutil.rmtree(cache, ignore_errors=True)
    for label in ("fresh", "warm"):
        walls = [r["wall_s"] for r in rows if r["reference_worker"] == label]
        if walls:
            print(f"{label}: median {statistics.median(walls):.2f} s, max {max(walls):.2f} s")
    return 0


def _row(path: Path, result, wall: float, label: str) -> dict:
    return {
        "problem": path.stem,
        "reference_worker": label,
        "verdict": result.verdict.value,
        "wall_s": round(wall, 2),
        "phase_s": result.phase_s,
        "aa": result.speedup,
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
