"""Demo: the verifier accepts an honest rewrite and refuses two tempting wrong ones.

Runs the real `kernel-agent eval` command on examples/gemm_divide_sum_scale.py (KernelBench
L2/14's pattern) against three candidates, and exits non-zero if any verdict is not the
expected one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
REFERENCE = HERE / "gemm_divide_sum_scale.py"
CASES = [
    ("gemm_divide_sum_scale_new.py", "an honest rewrite (sum moved ahead of the GEMM)", 0),
    ("gemm_divide_sum_scale_stale.py", "weights folded once at __init__", 1),
    ("gemm_divide_sum_scale_cached.py", "the first answer cached forever", 1),
]


def main() -> int:
    command = [sys.executable, "-m", "agents", "eval", str(REFERENCE)]
    failures = 0
    for name, what, expected in CASES:
        print(f"\n$ kernel-agent eval {REFERENCE.name} {name}    # {what}", flush=True)
        done = subprocess.run([*command, str(HERE / name)], text=True, capture_output=True)
        print(done.stdout.rstrip() or done.stderr.rstrip())
        if done.returncode != expected:
            failures += 1
            print(f"!! expected exit status {expected}, got {done.returncode}")
    print("\ndemo:", "all verdicts as expected" if not failures else f"{failures} unexpected")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
