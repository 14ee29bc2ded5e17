"""Saturation time on every bench problem (issue 20: under 2 s of CPU time each).

Traces each problem's Model, lowers it, runs the rules to saturation or budget and extracts
the cheapest form, timing the whole of it in process CPU seconds; prints what was found.

Usage: python bench/egraph_saturation.py [OUT.json] [DIR ...]  (default: bench/problems,
tests/kernelbench_style, tests/algebra_problems)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.offline.egraph.lower import lower  # noqa: E402
from agents.offline.egraph.saturate import saturate  # noqa: E402
from agents.offline.fx import tracing  # noqa: E402
from agents.offline.passes.base import Program  # noqa: E402
from agents.task import SourceFile, build_model, call_factory, load_problem  # noqa: E402

DIRS = ["bench/problems", "tests/kernelbench_style", "tests/algebra_problems"]


def measure(path: Path) -> dict:
    source = SourceFile.from_path(path)
    problem = load_problem(source)
    torch.manual_seed(0)
    init = call_factory(problem.get_init_inputs, source, "get_init_inputs")
    model = build_model(problem.model_class, init, source)
    inputs = call_factory(problem.get_inputs, source, "get_inputs")
    program = Program(source.text, "Model", model, inputs, init, "cpu")
    started = time.process_time()
    try:
        gm = tracing.trace(program)
        low = lower(gm)
        if not any(term is not None for term in low.outputs):  # tuples are saturated whole
            return {"problem": path.stem, "skipped": "no tensor output the rules can read"}
        found = saturate(low, "cpu")
    except tracing.TraceError as error:
        return {"problem": path.stem, "skipped": str(error)[:120]}
    return {
        "problem": path.stem,
        "cpu_s": round(time.process_time() - started, 3),
        "rounds": found.rounds,
        "nodes": found.nodes,
        "cheaper": found.cost < found.original_cost * (1 - 1e-6),
        "fired": found.fired,
    }


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv and argv[0].endswith(".json") else None
    dirs = [a for a in argv if not a.endswith(".json")] or DIRS
    paths = sorted(p for d in dirs for p in (ROOT / d).rglob("[0-9]*.py"))
    rows = []
    for path in paths:
        row = measure(path)
        rows.append(row)
        print(json.dumps(row), flush=True)
    timed = [r["cpu_s"] for r in rows if "cpu_s" in r]
    cheaper = sum(r.get("cheaper", False) for r in rows)
    print(
        f"{len(timed)} saturated, max {max(timed):.3f} CPU s, over 2 s: "
        f"{sum(t > 2 for t in timed)}; cheaper form found: {cheaper}"
    )
    if out:
        out.write_text(json.dumps({"rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
