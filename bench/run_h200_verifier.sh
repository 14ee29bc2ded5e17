#!/usr/bin/env bash
# One device call for the verifier's GPU figures (issue 18) on a lent H200:
#   part 1: the cost of a GPU context switch (bench/cuda_context_switch.py), the CUDA tests
#           (jail with the GPU, the adversarial families on CUDA), then the outside-the-process
#           timing against CUDA events (bench/cuda_timing_check.py);
#   part 2: the rest of that comparison (it resumes from RESUME.json), then torch.compile
#           against eager on a few problems (honest speedups, to set beside 2026-12-03's).
# Usage (repository root; carried: .whl/ with the non-image wheels, .bwrap/ with bubblewrap
# 0.8 and its libraries, since the image has no bubblewrap):
#   bash bench/run_h200_verifier.sh 1 [SECONDS]
#   bash bench/run_h200_verifier.sh 2 [SECONDS] RESUME.json
#   . bench/run_h200_verifier.sh setup   (installs only, for commands of your own)
# Writes under ${OUT:-out}/.
set -uo pipefail
part=${1:-1}
deadline=$((SECONDS + ${2:-560}))
resume=${3:-}
out=${OUT:-out}
mkdir -p "$out"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
if ! command -v bwrap > /dev/null && [ -x .bwrap/bwrap ]; then
  cp .bwrap/bwrap /usr/local/bin/bwrap
  for lib in .bwrap/lib*.so*; do
    name=$(basename "$lib")
    ldconfig -p | grep -q "${name%%.so*}.so" || cp -a "$lib" /usr/local/lib/
  done
  ldconfig
fi
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# setup: the wheels and bubblewrap only (sourced, it keeps PYTHONPATH for commands of your own)
[ "$part" = setup ] && { return 0 2>/dev/null || exit 0; }
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  bwrap --version
  python3 -c 'import pyseccomp; print("libseccomp", pyseccomp.get_api())'
  python3 -c 'from agents.sandbox.jail import find_jail; j = find_jail(); print(j and j.describe())'
} 2>&1 | tee "$out/gpu.txt"
left() { echo $((deadline - SECONDS)); }
if [ "$part" = 1 ]; then
  timeout 120 python3 bench/cuda_context_switch.py "$out/context_switch.json" 2>&1 \
    | tee "$out/context_switch.log"
  timeout 330 python3 -m pytest tests/integration/test_cuda.py -v -p no:cacheprovider 2>&1 \
    | tee "$out/pytest_cuda.log" | tail -n 25
  [ "$(left)" -gt 40 ] && timeout "$(left)" python3 bench/cuda_timing_check.py \
    "$out/cuda_timing.json" > "$out/cuda_timing.log" 2>&1
  tail -n 25 "$out/cuda_timing.log"
else
  [ -n "$resume" ] && cp "$resume" "$out/cuda_timing.json"
  # PROBLEMS (names, space-separated) narrows the comparison; CVE=0 leaves the compile runs out.
  paths=$(for name in ${PROBLEMS:-}; do echo "bench/problems/$name.py"; done)
  timeout $(($(left) - ${CVE_S:-200})) python3 bench/cuda_timing_check.py "$out/cuda_timing.json" \
    $paths > "$out/cuda_timing.log" 2>&1
  tail -n 25 "$out/cuda_timing.log"
  [ "${CVE:-1}" = 1 ] || exit 0
  for name in 03_softmax 07_swish 08_gelu 17_manual_softmax; do
    [ "$(left)" -gt 60 ] || break
    timeout "$(left)" python3 -m agents bench "bench/problems/$name.py" --device cuda \
      --size gpu --timing-budget 1.5 --out "$out/cve-$name.json" >> "$out/compile-vs-eager.log" 2>&1
  done
  python3 -m agents bench --from-json "$out"/cve-*.json --markdown 2>&1 | tail -n 12
fi
