#!/usr/bin/env bash
# The verifier's GPU path on a real NVIDIA GPU: the CUDA tests, then `eval --device cuda` on an
# honest CUDA load_inline rewrite, a side-stream cheat and the L2/14 example. Writes logs and
# JSON under ${OUT:-out}/. Needs torch with CUDA, tree-sitter and platformdirs importable.
set -uo pipefail
out=${OUT:-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$out/gpu.txt"
command -v bwrap && echo "bwrap available" | tee -a "$out/gpu.txt"
PYTHONUNBUFFERED=1 python3 -m pytest tests/integration/test_cuda.py -v -p no:cacheprovider 2>&1 | tee "$out/pytest_cuda.log"
for pair in "tests/cuda/elementwise.py tests/cuda/elementwise_cuda.py" \
            "tests/cuda/elementwise.py tests/cuda/elementwise_side_stream.py" \
            "examples/gemm_divide_sum_scale.py examples/gemm_divide_sum_scale_new.py"; do
  set -- $pair
  name=$(basename "$2" .py)
  python3 -m agents eval "$1" "$2" --device cuda --json > "$out/eval_$name.json" 2> "$out/eval_$name.err"
  echo "eval $name: exit $?"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: r[k] for k in ('verdict','speedup','reference_ms','candidate_ms','isolation')})" "$out/eval_$name.json" 2>/dev/null || cat "$out/eval_$name.err"
done
