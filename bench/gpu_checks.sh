#!/usr/bin/env bash
# The GPU checks, one part at a time, each resumable and each inside a time budget:
#   a  the CUDA tests: pytest -m cuda tests/test_triton_gemm.py tests/test_tuning_memory.py
#      tests/test_conv_tuning.py tests/test_cuda.py (one outcome per test; a rerun runs the rest)
#   b  fast verdicts: bench/verdict_times.py --pool (targets on CUDA: median fresh verdict under
#      15 s, none over 40 s)
#   c  the triton-gemm pass's tile and accuracy table (bench/triton_gemm_accuracy.py, CUDA only;
#      tf32x3 within the float64 band and 1.8x over eager on 01/09/10/15/19), then
#      `kernel-agent bench --optimize` on the e-graph and GEMM problems (vs torch.compile)
#   d  warm against cold memory: bench/self_improvement.py, one problem per run
#   e  KernelBench-style files: `kernel-agent bench tests/kernelbench_style --optimize`, one
#      file at a time, levels 1, 2 and 3 interleaved
#   f  timing from outside the process against CUDA events (bench/cuda_timing_check.py, CUDA
#      only) on the problems the 2026-12-04 run left out
#   g  the e-graph work's before/after table: c's rows beside the pattern passes' rows in
#      bench/figures (no new run)
#
# Usage (from anywhere; paths are the repository's):
#   bash bench/gpu_checks.sh PART [--device cuda|cpu] [--out DIR] [--seconds N]
#   PART: a, b, c, d, e, f, g, a comma list (a,b,f) or all. --device: cuda (default) or cpu
#   (tiny sizes and limits; a part that needs CUDA writes "skipped: needs CUDA"). --out: default
#   ${OUT:-out}/gpu-checks. --seconds: each part's budget (default 540 on cuda, 420 on cpu);
#   every command gets what is left of it (`timeout`), so a part ends inside it.
# Output: DIR/PART.json (all a part measured, and what a rerun needs to resume), DIR/PART.log
# and DIR/summary.md (rewritten by every part from the JSON files there). Run a part again
# with the same DIR and it skips finished work: tests with an outcome, problems with a row.
# Exit status: 0 passed (or skipped), 1 a check failed (on CUDA a missed target counts),
# 2 usage or setup error, 3 cut by the budget with no failure so far (run it again to resume).
# Python: ${PYTHON:-python3}. Packages it lacks come from .whl/ (installed into /tmp/site) and
# bubblewrap from .bwrap/, as on the lent GPU machine (bench/README.md, "GPU checks").
# Problem lists: GC_B_PROBLEMS, GC_C_ACCURACY, GC_C_PROBLEMS, GC_D_PROBLEMS, GC_E_PER_LEVEL,
# GC_F_PROBLEMS (names, space-separated; GC_C_ACCURACY comma-separated prefixes) override them.
set -uo pipefail

usage() {
  sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

parts="" device=cuda out="" seconds=""
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=${2:-}; shift 2 || usage ;;
    --device=*) device=${1#*=}; shift ;;
    --out) out=${2:-}; shift 2 || usage ;;
    --out=*) out=${1#*=}; shift ;;
    --seconds) seconds=${2:-}; shift 2 || usage ;;
    --seconds=*) seconds=${1#*=}; shift ;;
    -h|--help) usage ;;
    -*) echo "gpu_checks.sh: unknown option $1" >&2; usage ;;
    *) [ -z "$parts" ] || usage; parts=$1; shift ;;
  esac
done
[ -n "$parts" ] || usage
[ "$parts" = all ] && parts=a,b,c,d,e,f,g
case "$device" in cuda|cpu) ;; *) echo "gpu_checks.sh: --device cuda or cpu" >&2; exit 2 ;; esac
for part in ${parts//,/ }; do
  case "$part" in a|b|c|d|e|f|g) ;; *) echo "gpu_checks.sh: no part '$part'" >&2; exit 2 ;; esac
done
case "$seconds" in "") seconds=$([ "$device" = cuda ] && echo 540 || echo 420) ;;
  *[!0-9]*) echo "gpu_checks.sh: --seconds takes a number" >&2; exit 2 ;; esac

# Paths given relative to the caller's folder, before moving to the repository root.
out=${out:-${OUT:-out}/gpu-checks}
case "$out" in /*) ;; *) out=$PWD/$out ;; esac
PY=${PYTHON:-python3}
case "$PY" in */*) [ -e "$PY" ] && PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY") ;; esac
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
mkdir -p "$out" || exit 2
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-checks.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
export PYTHONUNBUFFERED=1

# --- setup: the packages the image lacks (.whl/), bubblewrap (.bwrap/), the GPU -------------
IMPORTS="import egglog, pygls, lsprotocol, tree_sitter, tree_sitter_python, tree_sitter_cuda, platformdirs, pyseccomp, rich, pytest_asyncio"
if ! "$PY" -c "$IMPORTS" 2> /dev/null; then
  site=${GC_SITE:-/tmp/site}
  if ! PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c "$IMPORTS" 2> /dev/null; then
    if ! compgen -G ".whl/*.whl" > /dev/null; then
      echo "gpu_checks.sh: $PY lacks packages ($IMPORTS) and there is no .whl/ to install" >&2
      exit 2
    fi
    echo "installing .whl/ into $site"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" .whl/*.whl || exit 2
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  "$PY" -c "$IMPORTS" || { echo "gpu_checks.sh: still missing packages after .whl/" >&2; exit 2; }
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! command -v bwrap > /dev/null && [ -x .bwrap/bwrap ] && [ "$(id -u)" = 0 ]; then
  cp .bwrap/bwrap /usr/local/bin/bwrap
  for lib in .bwrap/lib*.so*; do
    name=$(basename "$lib")
    ldconfig -p | grep -q "${name%%.so*}.so" || cp -a "$lib" /usr/local/lib/
  done
  ldconfig
fi
command -v bwrap > /dev/null || echo "warning: no bubblewrap: the verifier refuses candidates"
if [ "$device" = cuda ]; then
  if ! "$PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2> /dev/null; then
    echo "gpu_checks.sh: no CUDA GPU visible to $PY; run the CPU parts with --device cpu" >&2
    exit 2
  fi
  machine=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    2> /dev/null | head -n 1)
else
  machine="$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo 2> /dev/null | head -n 1), $(nproc) cores"
fi
machine="$machine; torch $("$PY" -c 'import torch; print(torch.__version__)'), Python $("$PY" -c 'import platform; print(platform.python_version())')"
echo "machine: $machine"

# Every choice a part makes, for the helper below (env: a rerun picks up the same lists).
export GC_OUT=$out GC_WORK=$work GC_DEVICE=$device GC_MACHINE=$machine
if [ "$device" = cuda ]; then
  export GC_B_PROBLEMS=${GC_B_PROBLEMS:-"01_matmul 03_softmax 08_gelu 11_conv_bias_scale_clamp 17_manual_softmax 20_attention_block 21_residual_conv_block 04_layernorm 13_gemm_divide_sum_scaling 06_maxpool2d 09_gemm_relu 02_conv2d 05_sum_reduction 07_swish 10_gemm_gelu 12_sum_max_mean 14_matmul_sum_max_avgpool_logsumexp 15_gemm_scale_shift 16_conv_scale_shift_relu 18_manual_layernorm 19_mlp_block"}
  export GC_C_ACCURACY=${GC_C_ACCURACY:-01,09,10,15,19}
  export GC_C_PROBLEMS=${GC_C_PROBLEMS:-"13_gemm_divide_sum_scaling 14_matmul_sum_max_avgpool_logsumexp 15_gemm_scale_shift 16_conv_scale_shift_relu 09_gemm_relu 10_gemm_gelu 19_mlp_block 01_matmul 11_conv_bias_scale_clamp"}
  export GC_D_PROBLEMS=${GC_D_PROBLEMS:-"09_gemm_relu 15_gemm_scale_shift 10_gemm_gelu 19_mlp_block 01_matmul"}
  export GC_E_PER_LEVEL=${GC_E_PER_LEVEL:-99}
  export GC_F_PROBLEMS=${GC_F_PROBLEMS:-"08_gelu 21_residual_conv_block 04_layernorm 11_conv_bias_scale_clamp 17_manual_softmax 13_gemm_divide_sum_scaling 20_attention_block 02_conv2d 05_sum_reduction 06_maxpool2d 10_gemm_gelu 12_sum_max_mean 14_matmul_sum_max_avgpool_logsumexp 15_gemm_scale_shift 16_conv_scale_shift_relu 18_manual_layernorm 19_mlp_block"}
  size=(--size gpu) evals=${GC_MAX_EVALS:-8} timing=1 parallel=4 d_evals=${GC_D_MAX_EVALS:-4}
else
  export GC_B_PROBLEMS=${GC_B_PROBLEMS:-"04_layernorm 13_gemm_divide_sum_scaling"}
  export GC_C_ACCURACY=""
  export GC_C_PROBLEMS=${GC_C_PROBLEMS:-13_gemm_divide_sum_scaling}
  export GC_D_PROBLEMS=${GC_D_PROBLEMS:-13_gemm_divide_sum_scaling}
  export GC_E_PER_LEVEL=${GC_E_PER_LEVEL:-0}  # 0: the one file below
  export GC_F_PROBLEMS=""
  size=() evals=${GC_MAX_EVALS:-2} timing=0.5 parallel=1 d_evals=${GC_D_MAX_EVALS:-1}
fi

# --- the helper: JSON bookkeeping, checks and summary.md (stdlib Python) ---------------------
helper() {
  "$PY" - "$@" << 'PYEOF'
import glob, json, math, os, re, statistics, sys, time
from pathlib import Path

OUT, WORK, DEVICE = Path(os.environ["GC_OUT"]), Path(os.environ["GC_WORK"]), os.environ["GC_DEVICE"]
CUDA = DEVICE == "cuda"
TITLES = {
    "a": "CUDA tests (pytest -m cuda)",
    "b": "fast verdicts (bench/verdict_times.py --pool)",
    "c": "triton-gemm accuracy and tiles; bench --optimize against torch.compile",
    "d": "warm against cold tuning memory (bench/self_improvement.py)",
    "e": "KernelBench-style files (bench tests/kernelbench_style --optimize)",
    "f": "timing from outside the process against CUDA events (bench/cuda_timing_check.py)",
    "g": "before/after the e-graph work (c's rows beside bench/figures)",
}
TESTS = ["tests/test_triton_gemm.py", "tests/test_tuning_memory.py",
         "tests/test_conv_tuning.py", "tests/test_cuda.py"]


def load(path, default=None):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return default


def save(path, data):
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(partial, path)


def names(var):
    return os.environ.get(var, "").split()


def fmt(x, spec=".2f", unit=""):
    return "" if x is None else f"{x:{spec}}{unit}"


def geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def kb_paths():
    """tests/kernelbench_style's files, levels interleaved (1, 2, 3, 1, 2, 3, ...)."""
    order = lambda p: (int(re.match(r"\d+", p.name).group()) if re.match(r"\d+", p.name) else 10**9, p.name)
    levels = [sorted(Path(f"tests/kernelbench_style/KernelBench/level{n}").glob("*.py"), key=order)
              for n in (1, 2, 3)]
    per = int(os.environ.get("GC_E_PER_LEVEL", "0"))
    if per == 0:  # the CPU's one file: a level-1 clamp the e-graph folds
        return [Path("tests/kernelbench_style/KernelBench/level1/10_Clamp_to_a_constant_tensor.py")]
    levels = [files[:per] for files in levels]
    return [files[i] for i in range(max(map(len, levels))) for files in levels if i < len(files)]


def kb_name(path):
    return f"{path.parent.name}/{path.stem}" if re.match(r"level\d+$", path.parent.name) else path.stem


# --- a: test outcomes from the log (pytest -v), kept in a.json across reruns ---
OUTCOME = re.compile(r"^(tests/\S+?::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
REASON = re.compile(r"^(FAILED|ERROR) (tests/\S+)(?: - (.*))?$")


def a_state():
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
    collected = [l.strip() for l in (WORK / "a-collected.txt").read_text().splitlines()
                 if "::" in l] if (WORK / "a-collected.txt").exists() else state.get("collected", [])
    return {"collected": collected, "tests": tests, "reasons": reasons, "skip_reasons": skips}


def a_pending():
    s = a_state()
    return [t for t in s["collected"] if t not in s["tests"]]


def a_finish(prev):
    s = a_state()
    lines, fail, target = [], [], []
    counts = {}
    for t in s["collected"]:
        counts[s["tests"].get(t, "not run")] = counts.get(s["tests"].get(t, "not run"), 0) + 1
    lines.append(f"{len(s['collected'])} collected: " + ", ".join(f"{n} {k.lower()}" for k, n in sorted(counts.items())))
    for t, outcome in s["tests"].items():
        if outcome in ("FAILED", "ERROR", "XPASS"):
            fail.append(f"{outcome} {t}: {s['reasons'].get(t, 'see a.log')}")
    warn = [f"skipped on CUDA: {line}" for line in s["skip_reasons"]] if CUDA else []
    pending = [t for t in s["collected"] if t not in s["tests"]]
    if not s["collected"]:
        fail.append("no test was collected (see a.log)")
    return {**s}, lines, fail, target, warn, pending


# --- b: verdict times, rows merged from each run's file ---
def b_rows(prev):
    rows = {(r["problem"], r["reference_worker"]): r for r in prev.get("rows", [])}
    for r in (load(WORK / "b-run.json", {}) or {}).get("rows", []):
        rows[(r["problem"], r["reference_worker"])] = r
    return list(rows.values())


def b_pending():
    prev = load(OUT / "b.json", {}) or {}
    done = {r["problem"] for r in b_rows(prev) if r["reference_worker"] == "warm"}
    return [p for p in names("GC_B_PROBLEMS") if p not in done]


def b_finish(prev):
    rows = b_rows(prev)
    order = {p: i for i, p in enumerate(names("GC_B_PROBLEMS"))}
    rows.sort(key=lambda r: (order.get(r["problem"], 99), r["reference_worker"]))
    lines, fail, target, warn = [], [], [], []
    for label in ("fresh", "warm"):
        walls = [(r["wall_s"], r["problem"]) for r in rows if r["reference_worker"] == label]
        if walls:
            worst = max(walls)
            lines.append(f"{label} reference worker: {len(walls)} verdicts, median {statistics.median(w for w, _ in walls):.2f} s, "
                         f"max {worst[0]:.2f} s ({worst[1]})")
    aa = [r["aa"] for r in rows if r.get("aa")]
    if aa:
        lines.append(f"A/A speedup: median {statistics.median(aa):.3f}, range {min(aa):.3f}-{max(aa):.3f}")
    lines += ["", "| problem | worker | verdict | wall s | start | build | run | measure | A/A |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        ph = r.get("phase_s") or {}
        lines.append(f"| {r['problem']} | {r['reference_worker']} | {r['verdict']} | {r['wall_s']:.2f} | "
                     + " | ".join(fmt(ph.get(k), ".2f") for k in ("start", "build", "run", "measure"))
                     + f" | {fmt(r.get('aa'), '.3f')} |")
        if r["verdict"] != "correct":
            fail.append(f"{r['problem']} ({r['reference_worker']}): the A/A verdict is {r['verdict']}, not correct")
        elif r.get("aa") and not 0.9 <= r["aa"] <= 1.1:
            warn.append(f"{r['problem']} ({r['reference_worker']}): A/A {r['aa']:.3f}, outside 0.9-1.1")
    fresh = [r for r in rows if r["reference_worker"] == "fresh"]
    if CUDA and fresh:
        median = statistics.median(r["wall_s"] for r in fresh)
        if median >= 15:
            target.append(f"median fresh verdict {median:.2f} s, target under 15 s")
        for r in fresh:
            if r["wall_s"] > 40:
                target.append(f"{r['problem']}: verdict in {r['wall_s']:.2f} s, target at most 40 s")
    return {"rows": rows}, lines, fail, target, warn, b_pending()


# --- c and e: bench --optimize reports; c also the accuracy table ---
def optimize_lines(report, wanted):
    rows = {r["problem"]: r for r in (report or {}).get("rows", [])}
    lines = ["| problem | verdict | answer | eager ms | compile ms | ours ms | ours/eager | ours/compile | evals | wall s | passes |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    fail, warn = [], []
    for name in wanted:
        r = rows.get(name)
        if r is None:
            continue
        lines.append(f"| {name} | {r['verdict']} | {r.get('answer') or ''} | {fmt(r.get('eager_ms'), '.3f')} | "
                     f"{fmt(r.get('compile_ms'), '.3f')} | {fmt(r.get('agent_ms'), '.3f')} | {fmt(r.get('speedup'), '.2f', 'x')} | "
                     f"{fmt(r.get('vs_compile'), '.2f', 'x')}{' (derived)' if r.get('vs_compile_derived') else ''} | "
                     f"{r.get('evaluations', '')} | {fmt(r.get('wall_s'), '.0f')} | {' → '.join(r.get('methods') or [])} |")
        if r["verdict"] == "error":
            fail.append(f"{name}: error: {r.get('error') or '; '.join(r.get('notes') or [])}")
        elif r["verdict"] == "correct" and (r.get("speedup") or 0) < 1:
            fail.append(f"{name}: returned {r['speedup']:.2f}x, slower than the original")
        if r["verdict"] != "error" and r.get("vs_compile") is not None and r["vs_compile"] < 0.95:
            fail.append(f"{name}: the answer is {r['vs_compile']:.2f}x of torch.compile (slower than compile)")
        for note in r.get("notes") or []:
            if note.startswith("torch.compile"):
                warn.append(f"{name}: {note[:300]}")
    done = [rows[n] for n in wanted if n in rows and rows[n]["verdict"] != "error"]
    if done:
        ge = geomean([r.get("speedup") for r in done])
        gc = geomean([r.get("vs_compile") for r in done])
        gce = geomean([r.get("compile_speedup") for r in done])
        lines.append("")
        lines.append(f"geomean over eager {fmt(ge, '.2f', 'x')}, over torch.compile {fmt(gc, '.2f', 'x')} "
                     f"(torch.compile over eager {fmt(gce, '.2f', 'x')}) on {len(done)} problems")
    pending = [n for n in wanted if n not in rows or rows[n]["verdict"] == "error"]
    return lines, fail, warn, pending


def accuracy_pending():
    acc = (load(WORK / "c-accuracy.json", {}) or {}).get("problems", {})
    want = [p for p in os.environ.get("GC_C_ACCURACY", "").split(",") if p]
    found = {Path(p).stem for p in glob.glob("bench/problems/*.py")}
    names_ = sorted(n for n in found if n.startswith(tuple(want))) if want else []
    keys = ("eager", "tf32x3", "tf32", "ieee")
    return [n for n in names_ if not all(k in acc.get(n, {}) and "error" not in acc[n][k] for k in keys)
            and "error" not in acc.get(n, {})], names_


def c_pending():
    report = load(WORK / "c-optimize.json", {})
    return optimize_lines(report, names("GC_C_PROBLEMS"))[3]


def c_finish(prev):
    accuracy = load(WORK / "c-accuracy.json", None) or prev.get("accuracy")
    report = load(WORK / "c-optimize.json", None) or prev.get("optimize")
    lines, fail, target, warn = [], [], [], []
    acc_pending, acc_names = accuracy_pending()
    if not CUDA:
        lines.append("triton_gemm_accuracy.py skipped: needs CUDA")
    elif accuracy:
        lines += ["triton-gemm kernels against fp32 eager and float64 (band ratio: within the verifier's band at <= 1):", "",
                  "| problem | eager ms | tf32x3 x | tf32x3 band | tf32x3 max rel | tf32 x | tf32 band | ieee x | ieee band | first call s | tiles (tf32x3) |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for name in acc_names:
            e = accuracy.get("problems", {}).get(name)
            if not e:
                continue
            if "error" in e:
                fail.append(f"{name}: triton_gemm_accuracy error: {e['error']}")
                continue
            t3, t1, ie = e.get("tf32x3", {}), e.get("tf32", {}), e.get("ieee", {})
            lines.append(f"| {name} | {fmt(e.get('eager', {}).get('ms'), '.3f')} | {fmt(t3.get('speedup_over_eager'), '.2f', 'x')} | "
                         f"{fmt(t3.get('band_ratio'), '.3f')} | {fmt(t3.get('max_rel_error'), '.2e')} | "
                         f"{fmt(t1.get('speedup_over_eager'), '.2f', 'x')} | {fmt(t1.get('band_ratio'), '.3f')} | "
                         f"{fmt(ie.get('speedup_over_eager'), '.2f', 'x')} | {fmt(ie.get('band_ratio'), '.3f')} | "
                         f"{t3.get('first_call_s', '')} | {'; '.join(t3.get('tiles') or []) or t3.get('error', '')} |")
            if "error" in t3:
                fail.append(f"{name}: the tf32x3 kernel: {t3['error']}")
            elif "within_band" in t3:
                if not t3["within_band"]:
                    fail.append(f"{name}: accuracy miss: tf32x3 outside the float64 band (ratio {t3.get('band_ratio', 0):.3f})")
                if (t3.get("speedup_over_eager") or 0) < 1.8:
                    target.append(f"{name}: tf32x3 {t3.get('speedup_over_eager', 0):.2f}x over eager, below the 1.8x expected")
        lines.append("")
    opt_lines, opt_fail, opt_warn, pending = optimize_lines(report, names("GC_C_PROBLEMS"))
    lines += ["bench --optimize:", ""] + opt_lines
    return ({"accuracy": accuracy, "optimize": report}, lines, fail + opt_fail, target, warn + opt_warn,
            (acc_pending if CUDA else []) + pending)


def e_pending():
    return optimize_lines(load(WORK / "e-optimize.json", {}), [kb_name(p) for p in kb_paths()])[3]


def e_finish(prev):
    report = load(WORK / "e-optimize.json", None) or prev.get("optimize")
    lines, fail, warn, pending = optimize_lines(report, [kb_name(p) for p in kb_paths()])
    return {"optimize": report}, lines, fail, [], warn, pending


# --- d: one self_improvement report per problem ---
def d_runs(prev):
    runs = dict(prev.get("runs", {}))
    for path in WORK.glob("d-*.json"):
        report = load(path)
        if report and report.get("cold"):
            runs[report["cold"][0]["problem"]] = report
    return runs


def d_pending():
    runs = d_runs(load(OUT / "d.json", {}) or {})
    return [p for p in names("GC_D_PROBLEMS") if p not in runs]


def d_finish(prev):
    runs = d_runs(prev)
    lines = ["| problem | cold: to best / evals | cold speedup | cold tuning s | warm: to best / evals | warm speedup | warm tuning s | s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    fail, target, warn = [], [], []
    cold_t = warm_t = 0.0
    for name in names("GC_D_PROBLEMS"):
        report = runs.get(name)
        if not report:
            continue
        c, w = report["cold"][0], report["warm"][0]
        cold_t, warm_t = cold_t + c["tuning_s"], warm_t + w["tuning_s"]
        lines.append(f"| {name} | {c['evaluations_to_best']} / {c['evaluations']} | {c['speedup']:.2f}x | {c['tuning_s']:.1f} | "
                     f"{w['evaluations_to_best']} / {w['evaluations']} | {w['speedup']:.2f}x | {w['tuning_s']:.1f} | {report['total_s']:.0f} |")
        for label, row in (("cold", c), ("warm", w)):
            if row["verdict"] == "error":
                fail.append(f"{name} ({label}): error")
        if CUDA and c["tuning_s"] > 0 and w["tuning_s"] >= c["tuning_s"]:
            target.append(f"{name}: warm tuning {w['tuning_s']:.1f} s, not below cold {c['tuning_s']:.1f} s")
        if w["speedup"] < 0.9 * c["speedup"]:
            warn.append(f"{name}: warm speedup {w['speedup']:.2f}x below cold {c['speedup']:.2f}x")
    if runs:
        lines += ["", f"triton-gemm compile and autotune seconds, summed: cold {cold_t:.1f}, warm {warm_t:.1f}"]
    return {"runs": runs}, lines, fail, target, warn, d_pending()


# --- f: outside against events ---
def f_pending():
    done = {r["problem"] for r in (load(WORK / "f-run.json", {}) or {}).get("rows", [])}
    return [p for p in names("GC_F_PROBLEMS") if p not in done]


def f_finish(prev):
    data = load(WORK / "f-run.json", None) or prev.get("timing") or {"rows": []}
    rows = data.get("rows", [])
    lines = ["| problem | verdict | outside ms | events ms | ratio | A/A | verdict s | start s | run s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    fail, target, warn = [], [], []
    for r in rows:
        ph = r.get("phase_s") or {}
        lines.append(f"| {r['problem']} | {r['verdict']} | {fmt(r.get('outside_ms'), '.4f')} | {fmt(r.get('events_ms'), '.4f')} | "
                     f"{fmt(r.get('ratio'), '.3f')} | {fmt(r.get('aa'), '.3f')} | {fmt(r.get('elapsed_s'), '.0f')} | "
                     f"{fmt(ph.get('start'), '.1f')} | {fmt(ph.get('run'), '.1f')} |")
        if r["verdict"] != "correct":
            fail.append(f"{r['problem']}: A/A verdict {r['verdict']}: {'; '.join(r.get('reasons') or [])[:300]}")
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
def g_finish(prev):
    c = load(OUT / "c.json", {}) or {}
    after = {r["problem"]: r for r in (c.get("optimize") or {}).get("rows", [])}
    if not after:
        return {}, ["skipped: no bench --optimize rows in c.json (run part c first)"], [], [], [], []
    kind = "h200" if CUDA else "cpu"
    files = sorted(glob.glob(f"bench/figures/optimize-{kind}-*.json"), key=lambda f: (len(f), f))
    if not CUDA:  # the full CPU table first, the single-problem reruns over it
        files = sorted(files, key=lambda f: (not f.endswith("-12-03.json"), f))
    before = {}
    for f in files:
        for r in (load(f, {}) or {}).get("rows", []):
            before[r["problem"]] = {**r, "file": f}
    lines = [f"before: {', '.join(sorted({Path(r['file']).name for r in before.values()})) or 'no figures'}; after: c.json",
             "", "| problem | before: verdict | ours/eager | ours/compile | passes | after: verdict | ours/eager | ours/compile | passes | after/before |",
             "| --- | --- | ---: | ---: | --- | --- | ---: | ---: | --- | ---: |"]
    warn, table = [], []
    for name in names("GC_C_PROBLEMS"):
        a, b = after.get(name), before.get(name)
        if a is None:
            continue
        ratio = (a.get("speedup") or 0) / b["speedup"] if b and b.get("speedup") else None
        table.append({"problem": name, "before": {k: b.get(k) for k in ("verdict", "speedup", "vs_compile", "methods", "file")} if b else None,
                      "after": {k: a.get(k) for k in ("verdict", "speedup", "vs_compile", "methods", "answer")}, "after_over_before": ratio})
        bcol = (f"{b['verdict']} | {fmt(b.get('speedup'), '.2f', 'x')} | {fmt(b.get('vs_compile'), '.2f', 'x')} | {' → '.join(b.get('methods') or [])}"
                if b else " | | | ")
        lines.append(f"| {name} | {bcol} | {a['verdict']} | {fmt(a.get('speedup'), '.2f', 'x')} | {fmt(a.get('vs_compile'), '.2f', 'x')} | "
                     f"{' → '.join(a.get('methods') or [])} | {fmt(ratio, '.2f', 'x')} |")
        if ratio is not None and ratio < 0.9:
            warn.append(f"{name}: after {a.get('speedup', 0):.2f}x, before {b['speedup']:.2f}x over eager")
    return {"table": table}, lines, [], [], warn, []


FINISH = {"a": a_finish, "b": b_finish, "c": c_finish, "d": d_finish, "e": e_finish, "f": f_finish, "g": g_finish}
PENDING = {"a": a_pending, "b": b_pending, "c": c_pending, "d": d_pending, "e": e_pending, "f": f_pending,
           "c-acc": lambda: accuracy_pending()[0], "e-paths": lambda: [str(p) for p in kb_paths() if kb_name(p) in e_pending()]}


def write_summary():
    parts = [(p, load(OUT / f"{p}.json")) for p in "abcdefg"]
    text = ["# GPU checks", "", f"`bash bench/gpu_checks.sh`, out folder `{OUT}`; updated "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", ""]
    for p, data in parts:
        if not data:
            continue
        text += [f"## {p}: {TITLES[p]}: {data['status'].upper()}", "",
                 f"- device {data['device']}; machine: {data['machine']}; {data['seconds']:.0f} s in this part's runs"]
        text += [f"- **FAIL** {x}" for x in data.get("fail", [])]
        text += [f"- **TARGET MISSED** {x}" for x in data.get("target", [])]
        text += [f"- note: {x}" for x in data.get("warn", [])]
        if data.get("pending"):
            text.append(f"- not finished ({len(data['pending'])}): {', '.join(data['pending'][:12])}"
                        f"{' ...' if len(data['pending']) > 12 else ''}; run the part again with the same --out to resume")
        text += [""] + data.get("lines", []) + [""]
        if data.get("commands"):
            text += ["Commands:", ""] + [f"    {c}" for c in data["commands"]] + [""]
    save_text = "\n".join(text) + "\n"
    (OUT / "summary.md").write_text(save_text)


def main():
    cmd, part = sys.argv[1], sys.argv[2]
    if cmd == "pending":
        items = PENDING[part]()
        if items:
            print("\n".join(items))
        return 0
    if cmd == "restore":  # a tool's own resume file, from the part's JSON
        prev = load(OUT / f"{part}.json", {}) or {}
        for key, name in {"c": [("accuracy", "c-accuracy.json"), ("optimize", "c-optimize.json")],
                          "e": [("optimize", "e-optimize.json")], "f": [("timing", "f-run.json")]}.get(part, []):
            if prev.get(key) and not (WORK / name).exists():
                save(WORK / name, prev[key])
        return 0
    prev = load(OUT / f"{part}.json", {}) or {}
    elapsed = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    if cmd == "skip":
        data = {"part": part, "status": "skipped", "lines": [f"skipped: {sys.argv[4]}"]}
        code = 0
    else:
        body, lines, fail, target, warn, pending = FINISH[part](prev)
        if not CUDA:  # the GPU targets mean nothing at the CPU's tiny sizes
            warn, target = warn + [f"(GPU target, not checked on the CPU) {t}" for t in target], []
        status = "failed" if fail or target else "incomplete" if pending else "passed"
        if part == "g" and not body:
            status = "skipped"
        data = {"part": part, "status": status, "fail": fail, "target": target, "warn": warn,
                "pending": pending, "lines": lines, **body}
        code = {"failed": 1, "incomplete": 3}.get(status, 0)
    commands = list(prev.get("commands", []))
    if (WORK / f"{part}-commands.txt").exists():
        commands += [c for c in (WORK / f"{part}-commands.txt").read_text().splitlines() if c]
    data.update(device=DEVICE, machine=os.environ.get("GC_MACHINE", ""), commands=commands,
                seconds=prev.get("seconds", 0.0) + elapsed,
                updated=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    save(OUT / f"{part}.json", data)
    write_summary()
    print(f"part {part}: {data['status']}")
    for label, items in (("FAIL", data.get("fail", [])), ("TARGET MISSED", data.get("target", [])),
                         ("note", data.get("warn", []))):
        for item in items:
            print(f"  {label}: {item}")
    if data.get("pending"):
        print(f"  not finished: {' '.join(data['pending'])}")
    for line in data.get("lines", []):
        print(f"  {line}")
    return code


sys.exit(main())
PYEOF
}

# --- running the tools -----------------------------------------------------------------------
left() { echo $((deadline - SECONDS)); }

# run PART LOG CMD...: the command, in the part's log, cut at what is left of the budget (less
# a margin for the bookkeeping); it is recorded for the part's JSON. 124: cut or not started.
run() {
  local part=$1 log=$2 t
  shift 2
  t=$(($(left) - 15))
  if [ "$t" -lt 20 ]; then
    echo "not started (budget spent): $*" | tee -a "$log"
    return 124
  fi
  local shown="$*"
  shown=${shown//$work/WORK}
  echo "$shown" >> "$work/$part-commands.txt"
  echo "\$ $shown (limit ${t} s, $(date -u +%H:%M:%S) UTC)" | tee -a "$log"
  timeout -k 10 "$t" "$@" >> "$log" 2>&1
  local rc=$?
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "cut by the part's time budget" | tee -a "$log"
  echo "exit $rc after $(($(date +%s) - started_at)) s in this part" | tee -a "$log"
  return "$rc"
}

problem_paths() { for name in "$@"; do echo "bench/problems/$name.py"; done; }
finish() { helper finish "$1" "$((SECONDS - part_start))"; }
skip() { helper skip "$1" 0 "$2"; }

part_a() {
  [ "$device" = cuda ] || { skip a "needs CUDA"; return; }
  local log=$out/a.log
  "$PY" -m pytest --collect-only -q -m cuda -p no:cacheprovider tests/test_triton_gemm.py \
    tests/test_tuning_memory.py tests/test_conv_tuning.py tests/test_cuda.py \
    > "$work/a-collected.txt" 2>> "$log"
  mapfile -t pending < <(helper pending a)
  [ ${#pending[@]} -eq 0 ] || run a "$log" "$PY" -m pytest -v -rfEs -p no:cacheprovider -m cuda \
    "${pending[@]}"
  finish a
}

part_b() {
  local log=$out/b.log flag=()
  [ "$device" = cuda ] && flag=(--cuda)
  mapfile -t pending < <(helper pending b)
  [ ${#pending[@]} -eq 0 ] || run b "$log" "$PY" bench/verdict_times.py "$work/b-run.json" \
    "${flag[@]}" --pool $(problem_paths "${pending[@]}")
  finish b
}

part_c() {
  local log=$out/c.log
  helper restore c
  if [ "$device" = cuda ]; then
    mapfile -t pending < <(helper pending c-acc)
    # the accuracy table takes at most half the budget; the optimizer runs next
    if [ ${#pending[@]} -gt 0 ]; then
      local keep=$deadline
      deadline=$((SECONDS + ($(left) / 2)))
      run c "$log" "$PY" bench/triton_gemm_accuracy.py --only "$GC_C_ACCURACY" \
        --out "$work/c-accuracy.json"
      deadline=$keep
    fi
  fi
  mapfile -t pending < <(helper pending c)
  for name in "${pending[@]}"; do
    [ "$(left)" -gt 60 ] || break
    run c "$log" "$PY" -m agents bench "bench/problems/$name.py" --optimize --device "$device" \
      "${size[@]}" --timing-budget "$timing" --max-evals "$evals" --parallel-evals "$parallel" \
      --resume "$work/c-optimize.json"
  done
  finish c
}

part_d() {
  local log=$out/d.log
  mapfile -t pending < <(helper pending d)
  for name in "${pending[@]}"; do
    [ "$(left)" -gt 60 ] || break
    run d "$log" "$PY" bench/self_improvement.py --device "$device" --only "${name%%_*}" \
      --max-evals "$d_evals" --timing-budget "$timing" --out "$work/d-$name.json"
  done
  finish d
}

part_e() {
  local log=$out/e.log
  helper restore e
  mapfile -t pending < <(helper pending e-paths)
  for path in "${pending[@]}"; do
    [ "$(left)" -gt 60 ] || break
    run e "$log" "$PY" -m agents bench "$path" --optimize --device "$device" \
      --timing-budget "$timing" --max-evals "$evals" --parallel-evals "$parallel" \
      --resume "$work/e-optimize.json"
  done
  finish e
}

part_f() {
  [ "$device" = cuda ] || { skip f "needs CUDA"; return; }
  local log=$out/f.log
  helper restore f
  mapfile -t pending < <(helper pending f)
  [ ${#pending[@]} -eq 0 ] || run f "$log" "$PY" bench/cuda_timing_check.py "$work/f-run.json" \
    $(problem_paths "${pending[@]}")
  finish f
}

part_g() { finish g; }

status=0
for part in ${parts//,/ }; do
  echo "=== part $part: device $device, budget $seconds s, out $out"
  part_start=$SECONDS started_at=$(date +%s) deadline=$((SECONDS + seconds))
  rm -f "$work/$part-commands.txt" "$work/b-run.json"
  "part_$part"
  rc=$?
  # 1 (a failure) outranks 3 (unfinished), which outranks 0
  if [ "$rc" = 1 ] || [ "$rc" = 2 ]; then status=1
  elif [ "$rc" = 3 ] && [ "$status" = 0 ]; then status=3; fi
done
echo "summary: $out/summary.md"
exit "$status"
