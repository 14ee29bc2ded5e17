"""The bookkeeping of bench/gpu_checks.sh: the script runs the tools, this keeps the record.

Why a separate program: every part must resume where a cut run stopped and report the same
way, so what a part has left, its checks (bench/gpu_checks_parts.py), its JSON file and the
summary.md over all parts are kept in one place, in Python rather than in the shell. The script
calls it with its GC_* environment set (GC_OUT, GC_WORK, GC_DEVICE, GC_MACHINE and the problem
lists), from the repository root:

    gpu_checks_report.py pending PART          what PART has left to run, one item a line
    gpu_checks_report.py restore PART          a tool's resume file, rebuilt from PART.json
    gpu_checks_report.py skip PART 0 REASON    PART.json saying skipped, and summary.md
    gpu_checks_report.py finish PART SECONDS   PART.json from the results, and summary.md

finish exits 0 passed, 1 failed (or a target missed on CUDA), 3 unfinished.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from gpu_checks_part_h import h_finish, h_pending, write_results
from gpu_checks_parts import (
    CUDA,
    DEVICE,
    OUT,
    WORK,
    Finish,
    a_finish,
    a_pending,
    accuracy_pending,
    b_finish,
    b_pending,
    c_finish,
    c_pending,
    d_finish,
    d_pending,
    e_finish,
    e_pending,
    f_finish,
    f_pending,
    g_finish,
    kb_name,
    kb_paths,
    load,
    save,
)

TITLES = {
    "a": "CUDA tests (pytest -m cuda)",
    "b": "fast verdicts (bench/verdict_times.py --pool)",
    "c": "triton-gemm accuracy and tiles; bench --optimize against torch.compile",
    "d": "warm against cold tuning memory (bench/self_improvement.py)",
    "e": "KernelBench-style files (bench tests/kernelbench_style --optimize)",
    "f": "timing from outside the process against CUDA events (bench/cuda_timing_check.py)",
    "g": "before/after the e-graph work (c's rows beside bench/figures)",
    "h": "fp32 GEMM shape classes against eager and torch.compile; timing's floor",
}
# the tools' own resume files, per part: (key in PART.json, file in GC_WORK)
RESUME_FILES = {
    "c": [("accuracy", "c-accuracy.json"), ("optimize", "c-optimize.json")],
    "e": [("optimize", "e-optimize.json")],
    "f": [("timing", "f-run.json")],
    "h": [("optimize", "h-optimize.json"), ("timing", "h-timing.json"), ("sizes", "h-sizes.json")],
}


def _accuracy_left() -> list[str]:
    return accuracy_pending()[0]


def _e_paths_left() -> list[str]:
    """Part e's files left to run, as paths for `kernel-agent bench`."""
    left = e_pending()
    return [str(p) for p in kb_paths() if kb_name(p) in left]


FINISH: dict[str, Callable[[dict[str, Any]], Finish]] = {
    "a": a_finish,
    "b": b_finish,
    "c": c_finish,
    "d": d_finish,
    "e": e_finish,
    "f": f_finish,
    "g": g_finish,
    "h": h_finish,
}
# c-acc: c's accuracy problems left; e-paths: e's files left (the shell runs them one by one)
PENDING: dict[str, Callable[[], list[str]]] = {
    "a": a_pending,
    "b": b_pending,
    "c": c_pending,
    "d": d_pending,
    "e": e_pending,
    "f": f_pending,
    "h": h_pending,
    "c-acc": _accuracy_left,
    "e-paths": _e_paths_left,
}


def part_section(p: str, data: dict[str, Any]) -> list[str]:
    """summary.md's section for one part, from its JSON file."""
    text = [
        f"## {p}: {TITLES[p]}: {data['status'].upper()}",
        "",
        f"- device {data['device']}; machine: {data['machine']}; "
        f"{data['seconds']:.0f} s in this part's runs",
    ]
    text += [f"- **FAIL** {x}" for x in data.get("fail", [])]
    text += [f"- **TARGET MISSED** {x}" for x in data.get("target", [])]
    text += [f"- note: {x}" for x in data.get("warn", [])]
    if data.get("pending"):
        more = " ..." if len(data["pending"]) > 12 else ""
        text.append(
            f"- not finished ({len(data['pending'])}): {', '.join(data['pending'][:12])}"
            f"{more}; run the part again with the same --out to resume"
        )
    text += ["", *data.get("lines", []), ""]
    if data.get("commands"):
        text += ["Commands:", "", *(f"    {c}" for c in data["commands"]), ""]
    return text


def write_summary() -> None:
    """summary.md, rewritten from every part's JSON file in the out folder."""
    updated = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    text = [
        "# GPU checks",
        "",
        f"`bash bench/gpu_checks.sh`, out folder `{OUT}`; updated {updated}.",
        "",
    ]
    for p in "abcdefgh":
        data = load(OUT / f"{p}.json")
        if data:
            text += part_section(p, data)
    (OUT / "summary.md").write_text("\n".join(text) + "\n")


def restore(part: str) -> None:
    """Put back a tool's resume file from PART.json (GC_WORK is new on every run)."""
    prev = load(OUT / f"{part}.json", {}) or {}
    for key, name in RESUME_FILES.get(part, []):
        if prev.get(key) and not (WORK / name).exists():
            save(WORK / name, prev[key])


def record(part: str, prev: dict[str, Any], data: dict[str, Any], elapsed: float) -> None:
    """Save PART.json (the commands and seconds added to the earlier runs') and summary.md."""
    commands = list(prev.get("commands", []))
    if (WORK / f"{part}-commands.txt").exists():
        commands += [c for c in (WORK / f"{part}-commands.txt").read_text().splitlines() if c]
    data.update(
        device=DEVICE,
        machine=os.environ.get("GC_MACHINE", ""),
        commands=commands,
        seconds=prev.get("seconds", 0.0) + elapsed,
        updated=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    )
    save(OUT / f"{part}.json", data)
    write_summary()


def show(part: str, data: dict[str, Any]) -> None:
    """The part's outcome on stdout, for the caller's log."""
    print(f"part {part}: {data['status']}")
    for label, items in (
        ("FAIL", data.get("fail", [])),
        ("TARGET MISSED", data.get("target", [])),
        ("note", data.get("warn", [])),
    ):
        for item in items:
            print(f"  {label}: {item}")
    if data.get("pending"):
        print(f"  not finished: {' '.join(data['pending'])}")
    for line in data.get("lines", []):
        print(f"  {line}")


def main(argv: list[str]) -> int:
    cmd, part = argv[1], argv[2]
    if cmd == "pending":
        items = PENDING[part]()
        if items:
            print("\n".join(items))
        return 0
    if cmd == "restore":
        restore(part)
        return 0
    prev = load(OUT / f"{part}.json", {}) or {}
    elapsed = float(argv[3]) if len(argv) > 3 else 0.0
    if cmd == "skip":
        data: dict[str, Any] = {"part": part, "status": "skipped", "lines": [f"skipped: {argv[4]}"]}
        code = 0
    else:
        body, lines, fail, target, warn, pending = FINISH[part](prev)
        if not CUDA:  # the GPU targets mean nothing at the CPU's tiny sizes
            warn, target = warn + [f"(GPU target, not checked on the CPU) {t}" for t in target], []
        status = "failed" if fail or target else "incomplete" if pending else "passed"
        if part == "g" and not body:
            status = "skipped"
        data = {
            "part": part,
            "status": status,
            "fail": fail,
            "target": target,
            "warn": warn,
            "pending": pending,
            "lines": lines,
            **body,
        }
        code = {"failed": 1, "incomplete": 3}.get(status, 0)
    record(part, prev, data, elapsed)
    if part == "h" and cmd == "finish":
        write_results(load(OUT / "h.json", {}) or data)
    show(part, data)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
