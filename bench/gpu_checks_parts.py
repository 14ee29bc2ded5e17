"""The parts of bench/gpu_checks.sh, one pair of functions each: what a part has left to run
(`*_pending`, so a rerun resumes) and what its results say (`*_finish`: the part's JSON body,
its summary lines, failures, missed targets and notes, and what is still pending).

Why a module: the shell script only runs the tools inside their time budgets; reading their
JSON files, checking them and merging them across reruns is this module's job (through
bench/gpu_checks_report.py, which the script calls with its GC_* environment set: GC_OUT the out
folder, GC_WORK its scratch folder, GC_DEVICE cuda or cpu, GC_*_PROBLEMS the problem lists).
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import statistics
from pathlib import Path
from typing import Any

OUT = Path(os.environ.get("GC_OUT", "."))
WORK = Path(os.environ.get("GC_WORK", "."))
DEVICE = os.environ.get("GC_DEVICE", "cpu")
CUDA = DEVICE == "cuda"
FAILURE_LOG = "a-failures.jsonl"  # part a's pytest writes it (KERNEL_AGENT_FAILURE_LOG)

# body (kept in PART.json), lines, fail, target, warn, pending
Finish = tuple[dict[str, Any], list[str], list[str], list[str], list[str], list[str]]


def load(path: str | Path, default: Any = None) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return default


def save(path: str | Path, data: Any) -> None:
    """Written beside, then renamed: a part cut mid-write leaves the old file whole."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(partial, path)


def names(var: str) -> list[str]:
    return os.environ.get(var, "").split()


def fmt(x: float | None, spec: str = ".2f", unit: str = "") -> str:
    return "" if x is None else f"{x:{spec}}{unit}"


def geomean(values: list[float | None]) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _number_first(path: Path) -> tuple[int, str]:
    """KernelBench files in their numbers' order (2_ before 10_), unnumbered ones last."""
    m = re.match(r"\d+", path.name)
    return (int(m.group()) if m else 10**9, path.name)


def kb_paths() -> list[Path]:
    """tests/kernelbench_style's files, levels interleaved (1, 2, 3, 1, 2, 3, ...)."""
    levels = [
        sorted(
            Path(f"tests/kernelbench_style/KernelBench/level{n}").glob("*.py"), key=_number_first
        )
        for n in (1, 2, 3)
    ]
    per = int(os.environ.get("GC_E_PER_LEVEL", "0"))
    if per == 0:  # the CPU's one file: a level-1 clamp the e-graph folds
        return [Path("tests/kernelbench_style/KernelBench/level1/10_Clamp_to_a_constant_tensor.py")]
    levels = [files[:per] for files in levels]
    return [files[i] for i in range(max(map(len, levels))) for files in levels if i < len(files)]


def kb_name(path: Path) -> str:
    if re.match(r"level\d+$", path.parent.name):
        return f"{path.parent.name}/{path.stem}"
    return path.stem


# --- a: test outcomes from the log (pytest -v), kept in a.json across reruns ---
OUTCOME = re.compile(r"^(tests/\S+?::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
REASON = re.compile(r"^(FAILED|ERROR) (tests/\S+)(?: - (.*))?$")


def failure_reasons(path: Path) -> dict[str, str]:
    """nodeid -> reason from the JSON lines tests/conftest.py appends as each test fails: the
    only reasons left when the budget cuts pytest before its -rfE summary. The first failing
    phase of a test wins; a line cut mid-write is skipped."""
    reasons: dict[str, str] = {}
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return reasons
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("nodeid"):
            reasons.setdefault(record["nodeid"], str(record.get("reason") or "")[:300])
    return reasons


def a_state() -> dict[str, Any]:
    state = load(OUT / "a.json", {}) or {}
    tests = dict(state.get("tests", {}))
    reasons = dict(state.get("reasons", {}))
    skips = list(state.get("skip_reasons", []))
    try:
        log = (OUT / "a.log").read_text(errors="replace").splitlines()
    except OSError:
        log = []
    for line in log:
        if m := OUTCOME.match(line):
            tests[m.group(1)] = m.group(2)
        elif m := REASON.match(line):
            reasons[m.group(2)] = (m.group(3) or "")[:300]
        elif line.startswith("SKIPPED [") and line not in skips:
            skips.append(line[:300])
    for nodeid, reason in failure_reasons(OUT / FAILURE_LOG).items():
        if not reasons.get(nodeid):
            reasons[nodeid] = reason
    collected_file = WORK / "a-collected.txt"
    if collected_file.exists():
        collected = [
            line.strip() for line in collected_file.read_text().splitlines() if "::" in line
        ]
    else:
        collected = state.get("collected", [])
    return {"collected": collected, "tests": tests, "reasons": reasons, "skip_reasons": skips}


def a_pending() -> list[str]:
    s = a_state()
    return [t for t in s["collected"] if t not in s["tests"]]


def a_finish(prev: dict[str, Any]) -> Finish:
    s = a_state()
    lines: list[str] = []
    fail: list[str] = []
    target: list[str] = []
    counts: dict[str, int] = {}
    for t in s["collected"]:
        counts[s["tests"].get(t, "not run")] = counts.get(s["tests"].get(t, "not run"), 0) + 1
    lines.append(
        f"{len(s['collected'])} collected: "
        + ", ".join(f"{n} {k.lower()}" for k, n in sorted(counts.items()))
    )
    for t, outcome in s["tests"].items():
        if outcome in ("FAILED", "ERROR", "XPASS"):
            fail.append(f"{outcome} {t}: {s['reasons'].get(t, 'see a.log')}")
    warn = [f"skipped on CUDA: {line}" for line in s["skip_reasons"]] if CUDA else []
    pending = [t for t in s["collected"] if t not in s["tests"]]
    if not s["collected"]:
        fail.append("no test was collected (see a.log)")
    return {**s}, lines, fail, target, warn, pending


# --- b: verdict times, rows merged from each run's file ---
def b_rows(prev: dict[str, Any]) -> list[dict[str, Any]]:
    rows = {(r["problem"], r["reference_worker"]): r for r in prev.get("rows", [])}
    for r in (load(WORK / "b-run.json", {}) or {}).get("rows", []):
        rows[(r["problem"], r["reference_worker"])] = r
    return list(rows.values())


def b_pending() -> list[str]:
    prev = load(OUT / "b.json", {}) or {}
    done = {r["problem"] for r in b_rows(prev) if r["reference_worker"] == "warm"}
    return [p for p in names("GC_B_PROBLEMS") if p not in done]


def b_finish(prev: dict[str, Any]) -> Finish:
    rows = b_rows(prev)
    order = {p: i for i, p in enumerate(names("GC_B_PROBLEMS"))}
    rows.sort(key=lambda r: (order.get(r["problem"], 99), r["reference_worker"]))
    lines: list[str] = []
    fail: list[str] = []
    target: list[str] = []
    warn: list[str] = []
    for label in ("fresh", "warm"):
        walls = [(r["wall_s"], r["problem"]) for r in rows if r["reference_worker"] == label]
        if walls:
            worst = max(walls)
            median = statistics.median(w for w, _ in walls)
            lines.append(
                f"{label} reference worker: {len(walls)} verdicts, median {median:.2f} s, "
                f"max {worst[0]:.2f} s ({worst[1]})"
            )
    aa = [r["aa"] for r in rows if r.get("aa")]
    if aa:
        lines.append(
            f"A/A speedup: median {statistics.median(aa):.3f}, range {min(aa):.3f}-{max(aa):.3f}"
        )
    lines += [
        "",
        "| problem | worker | verdict | wall s | start | build | run | measure | A/A |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        ph = r.get("phase_s") or {}
        phases = " | ".join(fmt(ph.get(k), ".2f") for k in ("start", "build", "run", "measure"))
        lines.append(
            f"| {r['problem']} | {r['reference_worker']} | {r['verdict']} | {r['wall_s']:.2f} | "
            + phases
            + f" | {fmt(r.get('aa'), '.3f')} |"
        )
        where = f"{r['problem']} ({r['reference_worker']})"
        if r["verdict"] != "correct":
            fail.append(f"{where}: the A/A verdict is {r['verdict']}, not correct")
        elif r.get("aa") and not 0.9 <= r["aa"] <= 1.1:
            warn.append(f"{where}: A/A {r['aa']:.3f}, outside 0.9-1.1")
    fresh = [r for r in rows if r["reference_worker"] == "fresh"]
    if CUDA and fresh:
        median = statistics.median(r["wall_s"] for r in fresh)
        if median >= 15:
            target.append(f"median fresh verdict {median:.2f} s, target under 15 s")
        for r in fresh:
            if r["wall_s"] > 40:
                target.append(
                    f"{r['problem']}: verdict in {r['wall_s']:.2f} s, target at most 40 s"
                )
    return {"rows": rows}, lines, fail, target, warn, b_pending()


# --- c and e: bench --optimize reports; c also the accuracy table ---
def _optimize_row(name: str, r: dict[str, Any]) -> str:
    derived = " (derived)" if r.get("vs_compile_derived") else ""
    return (
        f"| {name} | {r['verdict']} | {r.get('answer') or ''} | {fmt(r.get('eager_ms'), '.3f')} | "
        f"{fmt(r.get('compile_ms'), '.3f')} | {fmt(r.get('agent_ms'), '.3f')} | "
        f"{fmt(r.get('speedup'), '.2f', 'x')} | {fmt(r.get('vs_compile'), '.2f', 'x')}{derived} | "
        f"{r.get('evaluations', '')} | {fmt(r.get('wall_s'), '.0f')} | "
        f"{' → '.join(r.get('methods') or [])} |"
    )


def optimize_lines(
    report: dict[str, Any] | None, wanted: list[str]
) -> tuple[list[str], list[str], list[str], list[str]]:
    """The table of a bench --optimize report's rows, its failures, notes and what is left."""
    rows = {r["problem"]: r for r in (report or {}).get("rows", [])}
    lines = [
        "| problem | verdict | answer | eager ms | compile ms | ours ms | ours/eager "
        "| ours/compile | evals | wall s | passes |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    fail: list[str] = []
    warn: list[str] = []
    for name in wanted:
        r = rows.get(name)
        if r is None:
            continue
        lines.append(_optimize_row(name, r))
        if r["verdict"] == "error":
            fail.append(f"{name}: error: {r.get('error') or '; '.join(r.get('notes') or [])}")
        elif r["verdict"] == "correct" and (r.get("speedup") or 0) < 1:
            fail.append(f"{name}: returned {r['speedup']:.2f}x, slower than the original")
        if r["verdict"] != "error" and r.get("vs_compile") is not None and r["vs_compile"] < 0.95:
            fail.append(
                f"{name}: the answer is {r['vs_compile']:.2f}x of torch.compile "
                "(slower than compile)"
            )
        for note in r.get("notes") or []:
            if note.startswith("torch.compile"):
                warn.append(f"{name}: {note[:300]}")
    done = [rows[n] for n in wanted if n in rows and rows[n]["verdict"] != "error"]
    if done:
        ge = geomean([r.get("speedup") for r in done])
        gc = geomean([r.get("vs_compile") for r in done])
        gce = geomean([r.get("compile_speedup") for r in done])
        lines.append("")
        lines.append(
            f"geomean over eager {fmt(ge, '.2f', 'x')}, over torch.compile {fmt(gc, '.2f', 'x')} "
            f"(torch.compile over eager {fmt(gce, '.2f', 'x')}) on {len(done)} problems"
        )
    pending = [n for n in wanted if n not in rows or rows[n]["verdict"] == "error"]
    return lines, fail, warn, pending


def accuracy_pending() -> tuple[list[str], list[str]]:
    """The accuracy problems left to measure, and all the accuracy problems (GC_C_ACCURACY)."""
    acc = (load(WORK / "c-accuracy.json", {}) or {}).get("problems", {})
    want = [p for p in os.environ.get("GC_C_ACCURACY", "").split(",") if p]
    found = {Path(p).stem for p in glob.glob("bench/problems/*.py")}
    names_ = sorted(n for n in found if n.startswith(tuple(want))) if want else []
    keys = ("eager", "tf32x3", "tf32", "ieee")
    left = [
        n
        for n in names_
        if not all(k in acc.get(n, {}) and "error" not in acc[n][k] for k in keys)
        and "error" not in acc.get(n, {})
    ]
    return left, names_


def c_pending() -> list[str]:
    report = load(WORK / "c-optimize.json", {})
    return optimize_lines(report, names("GC_C_PROBLEMS"))[3]


def _accuracy_row(name: str, e: dict[str, Any]) -> str:
    t3, t1, ie = e.get("tf32x3", {}), e.get("tf32", {}), e.get("ieee", {})
    tiles = "; ".join(t3.get("tiles") or []) or t3.get("error", "")
    return (
        f"| {name} | {fmt(e.get('eager', {}).get('ms'), '.3f')} | "
        f"{fmt(t3.get('speedup_over_eager'), '.2f', 'x')} | "
        f"{fmt(t3.get('band_ratio'), '.3f')} | {fmt(t3.get('max_rel_error'), '.2e')} | "
        f"{fmt(t1.get('speedup_over_eager'), '.2f', 'x')} | {fmt(t1.get('band_ratio'), '.3f')} | "
        f"{fmt(ie.get('speedup_over_eager'), '.2f', 'x')} | {fmt(ie.get('band_ratio'), '.3f')} | "
        f"{t3.get('first_call_s', '')} | {tiles} |"
    )


def c_finish(prev: dict[str, Any]) -> Finish:
    accuracy = load(WORK / "c-accuracy.json", None) or prev.get("accuracy")
    report = load(WORK / "c-optimize.json", None) or prev.get("optimize")
    lines: list[str] = []
    fail: list[str] = []
    target: list[str] = []
    warn: list[str] = []
    acc_pending, acc_names = accuracy_pending()
    if not CUDA:
        lines.append("triton_gemm_accuracy.py skipped: needs CUDA")
    elif accuracy:
        lines += [
            "triton-gemm kernels against fp32 eager and float64 "
            "(band ratio: within the verifier's band at <= 1):",
            "",
            "| problem | eager ms | tf32x3 x | tf32x3 band | tf32x3 max rel | tf32 x | tf32 band "
            "| ieee x | ieee band | first call s | tiles (tf32x3) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for name in acc_names:
            e = accuracy.get("problems", {}).get(name)
            if not e:
                continue
            if "error" in e:
                fail.append(f"{name}: triton_gemm_accuracy error: {e['error']}")
                continue
            t3 = e.get("tf32x3", {})
            lines.append(_accuracy_row(name, e))
            if "error" in t3:
                fail.append(f"{name}: the tf32x3 kernel: {t3['error']}")
            elif "within_band" in t3:
                if not t3["within_band"]:
                    fail.append(
                        f"{name}: accuracy miss: tf32x3 outside the float64 band "
                        f"(ratio {t3.get('band_ratio', 0):.3f})"
                    )
                if (t3.get("speedup_over_eager") or 0) < 1.8:
                    target.append(
                        f"{name}: tf32x3 {t3.get('speedup_over_eager', 0):.2f}x over eager, "
                        "below the 1.8x expected"
                    )
        lines.append("")
    opt_lines, opt_fail, opt_warn, pending = optimize_lines(report, names("GC_C_PROBLEMS"))
    lines += ["bench --optimize:", "", *opt_lines]
    return (
        {"accuracy": accuracy, "optimize": report},
        lines,
        fail + opt_fail,
        target,
        warn + opt_warn,
        (acc_pending if CUDA else []) + pending,
    )


def e_pending() -> list[str]:
    return optimize_lines(load(WORK / "e-optimize.json", {}), [kb_name(p) for p in kb_paths()])[3]


def e_finish(prev: dict[str, Any]) -> Finish:
    report = load(WORK / "e-optimize.json", None) or prev.get("optimize")
    lines, fail, warn, pending = optimize_lines(report, [kb_name(p) for p in kb_paths()])
    return {"optimize": report}, lines, fail, [], warn, pending


# --- d: one self_improvement report per problem ---
def d_runs(prev: dict[str, Any]) -> dict[str, Any]:
    runs = dict(prev.get("runs", {}))
    for path in WORK.glob("d-*.json"):
        report = load(path)
        if report and report.get("cold"):
            runs[report["cold"][0]["problem"]] = report
    return runs


def d_pending() -> list[str]:
    runs = d_runs(load(OUT / "d.json", {}) or {})
    return [p for p in names("GC_D_PROBLEMS") if p not in runs]


def d_finish(prev: dict[str, Any]) -> Finish:
    runs = d_runs(prev)
    lines = [
        "| problem | cold: to best / evals | cold speedup | cold tuning s "
        "| warm: to best / evals | warm speedup | warm tuning s | s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    fail: list[str] = []
    target: list[str] = []
    warn: list[str] = []
    cold_t = warm_t = 0.0
    for name in names("GC_D_PROBLEMS"):
        report = runs.get(name)
        if not report:
            continue
        c, w = report["cold"][0], report["warm"][0]
        cold_t, warm_t = cold_t + c["tuning_s"], warm_t + w["tuning_s"]
        lines.append(
            f"| {name} | {c['evaluations_to_best']} / {c['evaluations']} | {c['speedup']:.2f}x | "
            f"{c['tuning_s']:.1f} | {w['evaluations_to_best']} / {w['evaluations']} | "
            f"{w['speedup']:.2f}x | {w['tuning_s']:.1f} | {report['total_s']:.0f} |"
        )
        for label, row in (("cold", c), ("warm", w)):
            if row["verdict"] == "error":
                fail.append(f"{name} ({label}): error")
        if CUDA and c["tuning_s"] > 0 and w["tuning_s"] >= c["tuning_s"]:
            target.append(
                f"{name}: warm tuning {w['tuning_s']:.1f} s, not below cold {c['tuning_s']:.1f} s"
            )
        if w["speedup"] < 0.9 * c["speedup"]:
            warn.append(f"{name}: warm speedup {w['speedup']:.2f}x below cold {c['speedup']:.2f}x")
    if runs:
        lines += [
            "",
            "triton-gemm compile and autotune seconds, summed: "
            f"cold {cold_t:.1f}, warm {warm_t:.1f}",
        ]
    return {"runs": runs}, lines, fail, target, warn, d_pending()


# --- f: outside against events ---
def f_pending() -> list[str]:
    done = {r["problem"] for r in (load(WORK / "f-run.json", {}) or {}).get("rows", [])}
    return [p for p in names("GC_F_PROBLEMS") if p not in done]


def f_finish(prev: dict[str, Any]) -> Finish:
    data = load(WORK / "f-run.json", None) or prev.get("timing") or {"rows": []}
    rows = data.get("rows", [])
    lines = [
        "| problem | verdict | outside ms | events ms | ratio | A/A | verdict s | start s "
        "| run s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    fail: list[str] = []
    target: list[str] = []
    warn: list[str] = []
    for r in rows:
        ph = r.get("phase_s") or {}
        lines.append(
            f"| {r['problem']} | {r['verdict']} | {fmt(r.get('outside_ms'), '.4f')} | "
            f"{fmt(r.get('events_ms'), '.4f')} | {fmt(r.get('ratio'), '.3f')} | "
            f"{fmt(r.get('aa'), '.3f')} | {fmt(r.get('elapsed_s'), '.0f')} | "
            f"{fmt(ph.get('start'), '.1f')} | {fmt(ph.get('run'), '.1f')} |"
        )
        if r["verdict"] != "correct":
            reasons = "; ".join(r.get("reasons") or [])[:300]
            fail.append(f"{r['problem']}: A/A verdict {r['verdict']}: {reasons}")
        elif r.get("aa") and not 0.95 <= r["aa"] <= 1.05:
            warn.append(f"{r['problem']}: A/A {r['aa']:.3f}, outside 0.95-1.05")
        if r.get("ratio") and r["ratio"] > 1.05:
            warn.append(f"{r['problem']}: outside/events {r['ratio']:.3f}, over 1.05")
    ratios = [r["ratio"] for r in rows if r.get("ratio")]
    if ratios:
        median = statistics.median(ratios)
        lines += ["", f"median outside/events {median:.3f} over {len(ratios)} problems"]
        if median > 1.05:
            target.append(f"median outside/events ratio {median:.3f}, target at most 1.05")
    return {"timing": data}, lines, fail, target, warn, f_pending()


# --- g: before/after from c.json and the figures ---
def _before_figures() -> dict[str, dict[str, Any]]:
    """problem -> its row in bench/figures' optimize runs of this device kind, the last wins."""
    kind = "h200" if CUDA else "cpu"
    files = sorted(glob.glob(f"bench/figures/optimize-{kind}-*.json"), key=lambda f: (len(f), f))
    if not CUDA:  # the full CPU table first, the single-problem reruns over it
        files = sorted(files, key=lambda f: (not f.endswith("-12-03.json"), f))
    before: dict[str, dict[str, Any]] = {}
    for f in files:
        for r in (load(f, {}) or {}).get("rows", []):
            before[r["problem"]] = {**r, "file": f}
    return before


def g_finish(prev: dict[str, Any]) -> Finish:
    c = load(OUT / "c.json", {}) or {}
    after = {r["problem"]: r for r in (c.get("optimize") or {}).get("rows", [])}
    if not after:
        return (
            {},
            ["skipped: no bench --optimize rows in c.json (run part c first)"],
            [],
            [],
            [],
            [],
        )
    before = _before_figures()
    figures = ", ".join(sorted({Path(r["file"]).name for r in before.values()})) or "no figures"
    lines = [
        f"before: {figures}; after: c.json",
        "",
        "| problem | before: verdict | ours/eager | ours/compile | passes "
        "| after: verdict | ours/eager | ours/compile | passes | after/before |",
        "| --- | --- | ---: | ---: | --- | --- | ---: | ---: | --- | ---: |",
    ]
    warn: list[str] = []
    table: list[dict[str, Any]] = []
    for name in names("GC_C_PROBLEMS"):
        a, b = after.get(name), before.get(name)
        if a is None:
            continue
        ratio = (a.get("speedup") or 0) / b["speedup"] if b and b.get("speedup") else None
        keys = ("verdict", "speedup", "vs_compile", "methods")
        kept_b = {k: b.get(k) for k in (*keys, "file")} if b else None
        kept_a = {k: a.get(k) for k in (*keys, "answer")}
        table.append(
            {"problem": name, "before": kept_b, "after": kept_a, "after_over_before": ratio}
        )
        bcol = (
            f"{b['verdict']} | {fmt(b.get('speedup'), '.2f', 'x')} | "
            f"{fmt(b.get('vs_compile'), '.2f', 'x')} | {' → '.join(b.get('methods') or [])}"
            if b
            else " | | | "
        )
        lines.append(
            f"| {name} | {bcol} | {a['verdict']} | {fmt(a.get('speedup'), '.2f', 'x')} | "
            f"{fmt(a.get('vs_compile'), '.2f', 'x')} | {' → '.join(a.get('methods') or [])} | "
            f"{fmt(ratio, '.2f', 'x')} |"
        )
        if ratio is not None and ratio < 0.9:
            warn.append(
                f"{name}: after {a.get('speedup') or 0:.2f}x, before {b['speedup']:.2f}x over eager"
            )
    return {"table": table}, lines, [], [], warn, []
