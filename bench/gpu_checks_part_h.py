"""Part h of bench/gpu_checks.sh (issue 31): the fp32 GEMM shape classes and timing's floor.

Two tables, each resumable:
- `kernel-agent bench bench/gemm_shapes/X.py --optimize` per GEMM shape-class problem: eager,
  torch.compile, ours, the method offered and its error over the float64 band, beside each
  problem's M·N·K (bench/gemm_sizes.py). Target: the median of ours/eager over the problems
  with M·N·K ≥ 2^33 is at least 1.8x (TF32's peak over three products bounds it near 2.6x).
- bench/cuda_timing_check.py on part f's problems plus a forward that launches no kernel:
  outside/events per problem. Targets: median at most 1.03, none over 1.10, and the no-kernel
  forward under 20 us from outside.
`h_results_md` renders both as the section bench/RESULTS.md keeps between its h markers.
"""

from __future__ import annotations

import glob
import os
import statistics
from pathlib import Path
from typing import Any

import gpu_checks_parts as parts
from gpu_checks_parts import Finish, fmt, load, names

LARGE_MNK = 2**33
GEMM_TARGET = 1.8
TIMING_MEDIAN, TIMING_MAX, NO_KERNEL_US = 1.03, 1.10, 20.0
NO_KERNEL = "00_no_kernel"  # bench/cuda_timing_check.py's forward that launches no GPU work
MARK_BEGIN, MARK_END = "<!-- gpu-checks h: begin -->", "<!-- gpu-checks h: end -->"


def gemm_problems() -> list[str]:
    """GC_H_PROBLEMS, else every file in bench/gemm_shapes, by name."""
    chosen = names("GC_H_PROBLEMS")
    return chosen or sorted(Path(p).stem for p in glob.glob("bench/gemm_shapes/*.py"))


def timing_problems() -> list[str]:
    """Paths of part f's problems (GC_F_PROBLEMS); the timing script adds its no-kernel row."""
    return [f"bench/problems/{n}.py" for n in names("GC_F_PROBLEMS")]


def h_pending() -> list[str]:
    """GEMM problems without a row, then timing paths without one (prefixed `t:`)."""
    rows = {r["problem"] for r in (load(parts.WORK / "h-optimize.json", {}) or {}).get("rows", [])}
    timed = {r["problem"] for r in (load(parts.WORK / "h-timing.json", {}) or {}).get("rows", [])}
    left = [n for n in gemm_problems() if n not in rows]
    left += [f"t:{p}" for p in timing_problems() if Path(p).stem not in timed]
    return left


def _chosen(row: dict[str, Any]) -> dict[str, Any]:
    """The candidate the row offers, from its `candidates` list (issue 31), if it has one."""
    for cand in row.get("candidates") or []:
        if cand.get("fate") == "chosen":
            return cand
    return {}


def _band(row: dict[str, Any]) -> float | None:
    cand = _chosen(row)
    return None if cand.get("error_ratio") is None else float(cand["error_ratio"])


def gemm_lines(
    report: dict[str, Any], sizes: dict[str, Any]
) -> tuple[list[str], list[str], list[str], float | None]:
    """The GEMM table, failures, notes, and the median ours/eager over the large shapes."""
    rows = {r["problem"]: r for r in report.get("rows", [])}
    lines = [
        "| problem | M·N·K | eager ms | compile ms | ours ms | ours/eager | ours/compile "
        "| method | error/band |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    fail: list[str] = []
    large: list[float] = []
    for name in gemm_problems():
        r = rows.get(name)
        if r is None:
            continue
        mnk = (sizes.get(name) or {}).get("mnk")
        log2 = (sizes.get(name) or {}).get("log2")
        speedup = r.get("speedup") if r.get("verdict") == "correct" else 1.0
        method = " → ".join(r.get("methods") or []) or r.get("answer") or ""
        lines.append(
            f"| {name} | {'' if log2 is None else f'2^{log2:g}'} | "
            f"{fmt(r.get('eager_ms'), '.3f')} | {fmt(r.get('compile_ms'), '.3f')} | "
            f"{fmt(r.get('agent_ms'), '.3f')} | {fmt(speedup, '.2f', 'x')} | "
            f"{fmt(r.get('vs_compile'), '.2f', 'x')} | {method} | {fmt(_band(r), '.3f')} |"
        )
        if r.get("verdict") == "error":
            fail.append(f"{name}: error: {r.get('error') or '; '.join(r.get('notes') or [])}")
        elif mnk and mnk >= LARGE_MNK:
            large.append(float(speedup or 1.0))
    median = statistics.median(large) if large else None
    notes = []
    if median is not None:
        notes.append(
            f"median ours/eager over the {len(large)} problems with M·N·K ≥ 2^33: {median:.2f}x "
            f"(target ≥ {GEMM_TARGET}x)"
        )
    return lines, fail, notes, median


def timing_lines(data: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The outside/events table, and the targets it misses."""
    rows = data.get("rows", [])
    lines = [
        "| problem | verdict | outside ms | events ms | outside/events | A/A |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    target: list[str] = []
    for r in rows:
        lines.append(
            f"| {r['problem']} | {r.get('verdict', '')} | {fmt(r.get('outside_ms'), '.4f')} | "
            f"{fmt(r.get('events_ms'), '.4f')} | {fmt(r.get('ratio'), '.3f')} | "
            f"{fmt(r.get('aa'), '.3f')} |"
        )
        if r["problem"] == NO_KERNEL and r.get("outside_ms") is not None:
            us = r["outside_ms"] * 1e3
            if us >= NO_KERNEL_US:
                target.append(
                    f"no-kernel forward from outside: {us:.1f} us (target < {NO_KERNEL_US:g})"
                )
    ratios = [r["ratio"] for r in rows if r.get("ratio") and r["problem"] != NO_KERNEL]
    if ratios:
        median, worst = statistics.median(ratios), max(ratios)
        lines += ["", f"outside/events: median {median:.3f}, max {worst:.3f} over {len(ratios)}"]
        if median > TIMING_MEDIAN:
            target.append(f"median outside/events {median:.3f}, target at most {TIMING_MEDIAN}")
        if worst > TIMING_MAX:
            target.append(f"max outside/events {worst:.3f}, target at most {TIMING_MAX}")
    return lines, target


def h_finish(prev: dict[str, Any]) -> Finish:
    report = load(parts.WORK / "h-optimize.json", None) or prev.get("optimize") or {"rows": []}
    timing = load(parts.WORK / "h-timing.json", None) or prev.get("timing") or {"rows": []}
    sizes = load(parts.WORK / "h-sizes.json", None) or prev.get("sizes") or {}
    g_lines, fail, notes, median = gemm_lines(report, sizes)
    t_lines, target = timing_lines(timing)
    if median is not None and median < GEMM_TARGET:
        target.append(f"median ours/eager on large GEMMs {median:.2f}x, target ≥ {GEMM_TARGET}x")
    for r in timing.get("rows", []):
        if r.get("verdict") not in (None, "correct"):
            fail.append(f"{r['problem']}: A/A verdict {r['verdict']}")
    lines = ["GEMM shape classes:", "", *g_lines, "", *notes, "", "Timing:", "", *t_lines]
    body = {"optimize": report, "timing": timing, "sizes": sizes}
    return body, lines, fail, target, [], h_pending()


def h_results_md(data: dict[str, Any]) -> str:
    """The section bench/RESULTS.md keeps between its h markers, from h.json."""
    commands = "\n".join(f"    {c}" for c in data.get("commands", []))
    missed = "".join(f"- target missed: {t}\n" for t in data.get("target", []))
    failed = "".join(f"- failed: {t}\n" for t in data.get("fail", []))
    lines = "\n".join(data.get("lines", []))
    return (
        f"{MARK_BEGIN}\n### GPU check h ({data.get('updated', '')}): {data.get('status', '')}\n\n"
        f"Machine: {data.get('machine', '')}.\n\n{failed}{missed}\n{lines}\n\n"
        f"Commands (`bash bench/gpu_checks.sh h`):\n\n{commands}\n{MARK_END}\n"
    )


def write_results(data: dict[str, Any], results: Path = Path("bench/RESULTS.md")) -> None:
    """Replace (or append) RESULTS.md's part-h section; a CPU run never writes there."""
    if os.environ.get("GC_DEVICE") != "cuda":
        return
    text = results.read_text() if results.exists() else ""
    section = h_results_md(data)
    if MARK_BEGIN in text and MARK_END in text:
        head, rest = text.split(MARK_BEGIN, 1)
        tail = rest.split(MARK_END, 1)[1].lstrip("\n")
        text = f"{head}{section}{tail}"
    else:
        text = f"{text.rstrip()}\n\n{section}"
    results.write_text(text)
    (parts.OUT / "RESULTS-h.md").write_text(section)
