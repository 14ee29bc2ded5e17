"""The equality-saturation pass against 10,000 random programs (issue 20).

Each program (tests/egraph_fuzz.py) is rewritten by the pass, and the rewrite is run on fresh
inputs with the same weights and seed against the verifier's float64 rule. Reports how many
were simplified, how many rewrites changed what a program computes (the target is 0) and how
long saturation took (CPU seconds). Resumable: rows are appended to OUT.jsonl as they finish.

Usage: python bench/egraph_fuzz.py OUT.jsonl [COUNT] [FIRST_SEED]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.egraph_fuzz import run_one


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    count = int(argv[1]) if len(argv) > 1 else 10_000
    first = int(argv[2]) if len(argv) > 2 else 0
    done = set()
    if out.exists():
        done = {json.loads(line)["seed"] for line in out.read_text().splitlines() if line}
    started = time.monotonic()
    with out.open("a") as sink:
        for seed in range(first, first + count):
            if seed in done:
                continue
            outcome = run_one(seed)
            row = {
                "seed": seed,
                "simplified": outcome.simplified,
                "changed_semantics": outcome.changed_semantics,
                "cpu_s": round(outcome.seconds, 4),
                "detail": outcome.detail[:200],
            }
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            if outcome.changed_semantics:
                print(f"seed {seed} CHANGED: {outcome.detail}\n{outcome.source}", flush=True)
    rows = [json.loads(line) for line in out.read_text().splitlines() if line]
    rows = [r for r in rows if first <= r["seed"] < first + count]
    times = sorted(r["cpu_s"] for r in rows)
    print(
        f"{len(rows)} programs: {sum(r['simplified'] for r in rows)} simplified, "
        f"{sum(r['changed_semantics'] for r in rows)} semantic changes; saturation CPU s "
        f"median {statistics.median(times):.3f}, p99 {times[int(0.99 * (len(times) - 1))]:.3f}, "
        f"max {times[-1]:.3f}; wall {time.monotonic() - started:.0f} s"
    )
    return 1 if any(r["changed_semantics"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
