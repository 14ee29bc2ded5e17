"""Where a fresh verdict's time goes, per phase, on every problem of a folder (issue 34).

For each problem, the eager baseline (the reference's own Model as the candidate,
`baseline_candidate`) judged by `evaluate` as the CLI judges it (its defaults: 5 trials, 2
reload trials, timing with its budget), `--runs` times, each fresh: new workers, no warm
reference, an empty build cache. Each run's wall seconds and its own per-phase seconds
(`EvalResult.phase_s`: start, build, run, anchor, compare, lane_wait, measure; see
agents/verify/phases.py) are kept; the table shows each problem's medians, and the last row
the median and max over problems. The parent's own peak RSS (VmHWM) is read after each
problem (the process's peak so far): it must stay flat whatever the outputs' sizes.

    python bench/verdict_time.py [--problems DIR] [--device cpu|cuda] [--size S] [--runs N]
                                 [--only 01,08] [--out FILE.json]

Resumable: a problem that already has `--runs` runs in `--out` is skipped (delete the file to
start over). Run it from another checkout (PYTHONPATH=/that/checkout) to get a "before".
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
PHASES = ("start", "build", "run", "anchor", "compare", "lane_wait", "measure")


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    paths = sorted(Path(args.problems).glob("*.py"))
    paths = [p for p in paths if not p.name.startswith("_")]
    if args.only:
        wanted = tuple(args.only.split(","))
        paths = [p for p in paths if p.stem.startswith(wanted)]
    if not paths:
        print(f"verdict_time: no problem files in {args.problems}", file=sys.stderr)
        return 2
    out = Path(args.out)
    data = json.loads(out.read_text()) if out.exists() else {"runs": []}
    data["settings"] = {"device": args.device, "size": args.size, "runs": args.runs}
    for path in paths:
        done = [r for r in data["runs"] if r["problem"] == path.stem]
        for _ in range(args.runs - len(done)):
            row = _one_verdict(path, args.device, args.size)
            data["runs"].append(row)
            print(json.dumps(row), flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(data, indent=1))
    print(table(data["runs"]))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default=str(ROOT / "problems"))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--size", default="default")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="", help="comma list of file-name prefixes")
    parser.add_argument("--out", default="out/verdict_time.json")
    return parser


def _one_verdict(path: Path, device: str, size: str) -> dict:
    from agents.bench.suite import baseline_candidate
    from agents.evaluate import EvalOptions, evaluate
    from agents.task import SourceFile

    reference = SourceFile.from_path(path)
    candidate = baseline_candidate(reference, "eager")
    cache = Path(tempfile.mkdtemp(prefix="verdict-time-"))  # no build cache: a fresh verdict
    options = EvalOptions(device=device, size=size, static_check=False, cache_dir=cache)
    began = time.monotonic()
    try:
        result = evaluate(reference, candidate, options)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {
        "problem": path.stem,
        "verdict": result.verdict.value,
        "wall_s": round(time.monotonic() - began, 3),
        "phase_s": result.phase_s,
        "parent_peak_rss_mb": round(_peak_rss_bytes() / 2**20),
        "reasons": result.reasons[:2],
    }


def _peak_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def table(runs: list[dict]) -> str:
    """A Markdown table of each problem's medians, then the median and max over problems."""
    problems = list(dict.fromkeys(r["problem"] for r in runs))
    head = ["problem", "runs", "wall s", *PHASES, "parent peak MB so far"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    walls = []
    for problem in problems:
        rows = [r for r in runs if r["problem"] == problem]
        wall = statistics.median(r["wall_s"] for r in rows)
        walls.append(wall)
        phases = [statistics.median(r["phase_s"].get(p, 0.0) for r in rows) for p in PHASES]
        bad = sorted({r["verdict"] for r in rows} - {"correct"})
        name = problem + (f" ({', '.join(bad)})" if bad else "")
        peak = max(r.get("parent_peak_rss_mb", 0) for r in rows)
        cells = [name, str(len(rows)), f"{wall:.2f}", *(f"{v:.2f}" for v in phases), str(peak)]
        lines.append("| " + " | ".join(cells) + " |")
    if walls:
        lines.append(
            f"| median over problems | | {statistics.median(walls):.2f} |"
            + " |" * len(PHASES)
            + f" max {max(walls):.2f} s |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
