#!/usr/bin/env bash
# The GPU checks, one part at a time, each resumable and each inside a time budget:
#   a  the CUDA tests: pytest -m cuda tests/integration/test_triton_gemm.py tests/integration/test_tuning_memory.py
#      tests/integration/test_conv_tuning.py tests/integration/test_cuda.py (one outcome per test; a rerun runs the rest)
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
#   h  issue 31: `kernel-agent bench --optimize` on each fp32 GEMM shape-class problem in
#      bench/gemm_shapes (M·N·K from bench/gemm_sizes.py; median ≥ 1.8x over eager where
#      M·N·K ≥ 2^33), then bench/cuda_timing_check.py on part f's problems and a forward that
#      launches no kernel (outside/events median ≤ 1.03, max ≤ 1.10; no kernel < 20 us); on
#      CUDA its table replaces the h section of bench/RESULTS.md (CUDA only)
#
# Usage (from anywhere; paths are the repository's):
#   bash bench/gpu_checks.sh PART [--device cuda|cpu] [--out DIR] [--seconds N]
#   PART: a, b, c, d, e, f, g, h, a comma list (a,b,f) or all. --device: cuda (default) or cpu
#   (tiny sizes and limits; a part that needs CUDA writes "skipped: needs CUDA"). --out: default
#   ${OUT:-out}/gpu-checks. --seconds: the budget of every part named; by default each part
#   has its own, on cuda and cpu: a 240, b 270, c 420, d 270, e 270, f 240, g 30 s (1740 s
#   together, so `all` (a-g) ends inside 30 minutes; h has 540 s on its own and each part inside 9; on cpu `all` takes about
#   150 s). Every command gets what is left of its part's budget (`timeout`), so a part ends
#   inside it; a part cut short lists what it left (b's 8 problems on CUDA may need two runs).
# Output: DIR/PART.json (all a part measured, and what a rerun needs to resume), DIR/PART.log,
# DIR/a-failures.jsonl (each failed test's reason as it fails: pytest cut by the budget never
# prints its summary) and DIR/summary.md (rewritten by every part from the JSON files there).
# A part cut by its budget resumes when run again with the same DIR: it skips finished work
# (tests with an outcome, problems with a row). The bookkeeping is bench/gpu_checks_report.py.
# Exit status: 0 passed (or skipped), 1 a check failed (on CUDA a missed target counts),
# 2 usage or setup error, 3 cut by the budget with no failure so far (run it again to resume).
# Python: ${PYTHON:-python3}. Packages it lacks come from .whl/ (installed into /tmp/site) and
# bubblewrap from .bwrap/, as on the lent GPU machine (bench/README.md, "GPU checks").
# Problem lists: GC_B_PROBLEMS, GC_C_ACCURACY, GC_C_PROBLEMS, GC_D_PROBLEMS, GC_E_PER_LEVEL,
# GC_F_PROBLEMS, GC_H_PROBLEMS (names, space-separated; GC_C_ACCURACY comma-separated prefixes) override them.
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
  case "$part" in a|b|c|d|e|f|g|h) ;; *) echo "gpu_checks.sh: no part '$part'" >&2; exit 2 ;; esac
done
case "$seconds" in *[!0-9]*) echo "gpu_checks.sh: --seconds takes a number" >&2; exit 2 ;; esac
# Each part's default budget: 1740 s together, so `all` ends inside a 30-minute device lease.
declare -A budget=([a]=240 [b]=270 [c]=420 [d]=270 [e]=270 [f]=240 [g]=30 [h]=540)
part_seconds() { echo "${seconds:-${budget[$1]}}"; }

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
  # 8 problems of different kinds (a verdict takes about 27 s fresh, 20 s warm on an H100)
  export GC_B_PROBLEMS=${GC_B_PROBLEMS:-"01_matmul 03_softmax 08_gelu 11_conv_bias_scale_clamp 13_gemm_divide_sum_scaling 17_manual_softmax 20_attention_block 04_layernorm"}
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

# --- the helper: JSON bookkeeping, checks and summary.md (stdlib Python; run from the root) ---
helper() { "$PY" bench/gpu_checks_report.py "$@"; }

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
  "$PY" -m pytest --collect-only -q -m cuda -p no:cacheprovider tests/integration/test_triton_gemm.py \
    tests/integration/test_tuning_memory.py tests/integration/test_conv_tuning.py tests/integration/test_cuda.py \
    > "$work/a-collected.txt" 2>> "$log"
  mapfile -t pending < <(helper pending a)
  # each failure's reason as it happens (tests/conftest.py): a cut run prints no -rfE summary
  [ ${#pending[@]} -eq 0 ] || KERNEL_AGENT_FAILURE_LOG=$out/a-failures.jsonl run a "$log" \
    "$PY" -m pytest -v -rfEs -p no:cacheprovider -m cuda "${pending[@]}"
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

part_h() {
  [ "$device" = cuda ] || { skip h "needs CUDA"; return; }
  local log=$out/h.log item timing=()
  helper restore h
  [ -s "$work/h-sizes.json" ] || run h "$log" "$PY" bench/gemm_sizes.py "$work/h-sizes.json" \
    bench/gemm_shapes/*.py
  mapfile -t pending < <(helper pending h)
  # the GEMM runs take at most GC_H_GEMM_SHARE percent of what is left; the timing runs next
  local keep=$deadline
  deadline=$((SECONDS + $(left) * ${GC_H_GEMM_SHARE:-65} / 100))
  for item in "${pending[@]}"; do
    case "$item" in
      t:*) timing+=("${item#t:}") ;;
      *)
        [ "$(left)" -gt 90 ] || continue
        run h "$log" "$PY" -m agents bench "bench/gemm_shapes/$item.py" --optimize \
          --device cuda --timing-budget 1 --max-evals "${GC_H_MAX_EVALS:-6}" \
          --parallel-evals 4 --resume "$work/h-optimize.json"
        ;;
    esac
  done
  deadline=$keep
  [ ${#timing[@]} -eq 0 ] || run h "$log" "$PY" bench/cuda_timing_check.py "$work/h-timing.json" \
    "${timing[@]}"
  finish h
}

status=0
for part in ${parts//,/ }; do
  part_budget=$(part_seconds "$part")
  echo "=== part $part: device $device, budget $part_budget s, out $out"
  part_start=$SECONDS started_at=$(date +%s) deadline=$((SECONDS + part_budget))
  rm -f "$work/$part-commands.txt" "$work/b-run.json"
  "part_$part"
  rc=$?
  # 1 (a failure) outranks 3 (unfinished), which outranks 0
  if [ "$rc" = 1 ] || [ "$rc" = 2 ]; then status=1
  elif [ "$rc" = 3 ] && [ "$status" = 0 ]; then status=3; fi
done
echo "summary: $out/summary.md"
exit "$status"
