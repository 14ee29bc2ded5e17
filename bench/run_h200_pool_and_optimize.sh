#!/usr/bin/env bash
# One device call for what is left of issues 6, 9 and 10 on a lent one-GPU H200:
#   1. the evaluation pool's throughput against workers, and the alone/busy isolation check
#      (bench/throughput.py, local backend: Ray is not on the device image);
#   2. the offline optimizer's H200 table for problems START.. (issue 6), one JSON row at a time,
#      so a call cut by its time limit keeps every finished problem.
# Usage (from the repository root, wheels of the non-image packages carried as .whl/):
#   bash bench/run_h200_pool_and_optimize.sh [START] [LIMIT] [SECONDS_IN_ALL] [PARALLEL_EVALS] \
#     [THROUGHPUT_SECONDS]
# The optimizer gets what is left of SECONDS_IN_ALL after the throughput run; THROUGHPUT_SECONDS=0
# leaves the throughput run out (a later call that only continues the optimize table).
# Sizes are small on purpose: each GPU child pays a torch import, CUDA start-up and (for the
# cuda-graphs pass) a graph capture, 3-28 s, so 18 candidates at 1 worker did not fit in 6 min;
# the sizes below ran in 197 s on 2026-12-04 (bench/RESULTS.md).
# Writes under ${OUT:-out}/: throughput-h200.json, optimize-h200-START.json and logs.
set -uo pipefail
start=${1:-13}
limit=${2:-10}
deadline=$((SECONDS + ${3:-560}))
parallel=${4:-4}
throughput_s=${5:-300}
out=${OUT:-out}
mkdir -p "$out"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())' \
  | tee -a "$out/gpu.txt"
# torch-compile candidates are left out (a max-autotune compile takes minutes on the H200), and
# cuda-graphs ones too (a capture per child); the batch is the references and the other passes.
if [ "$throughput_s" -gt 0 ]; then
  timeout "$throughput_s" python3 bench/throughput.py --device cuda --size gpu --backends local \
    --problems 4 --skip-passes torch-compile,cuda-graphs --workers 1,4 --rounds 2 --no-warmup \
    --isolation-kernels 2 --isolation-rounds 1 --timing-budget 0.5 \
    --out "$out/throughput-h200.json" --markdown > "$out/throughput-h200.log" 2>&1
  echo "throughput: exit $? (124: cut; the JSON keeps the finished stages)"
  tail -n 30 "$out/throughput-h200.log"
fi
left=$((deadline - SECONDS))
echo "optimize: ${left} s left"
[ "$left" -gt 60 ] || exit 0
timeout "$left" python3 -m agents bench bench/problems --optimize --device cuda --size gpu \
  --timing-budget 1 --max-evals 12 --start "$start" --limit "$limit" --parallel-evals "$parallel" \
  --out "$out/optimize-h200-$start.json" > "$out/optimize-h200-$start.log" 2>&1
echo "optimize: exit $? (124: cut by the time limit; finished rows are in the JSON)"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print([(x['problem'], x['verdict'], x['speedup'], x['wall_s']) for x in r['rows']])" \
  "$out/optimize-h200-$start.json" 2>/dev/null
