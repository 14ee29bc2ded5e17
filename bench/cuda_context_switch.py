"""Does a kernel take longer, seen from the host, right after another process used the GPU?

The verifier times each side from outside its process, and the L2 flush before a timed run is
issued by a process other than the one timed (the candidate cannot be trusted to flush for
itself). If the GPU pays a context switch when work arrives from another process, that cost
lands inside the bracket of whoever runs after a foreign flush. This script measures it: one
operation, timed from the host (launch to synchronize) and with events, after a flush issued
by the same process ("own"), after one issued by a helper process ("other"), and after its
own flush and 5 ms of idle device ("idle": as long as the requests between two timed runs
take), interleaved.

Usage: python bench/cuda_context_switch.py OUT.json
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

FLUSH_ELEMENTS = 256 * 1024 * 1024 // 4
HELPER = """
import sys, torch
buffer = torch.empty(ELEMENTS, device="cuda")
torch.cuda.synchronize()
sys.stdout.write("ready\\n"); sys.stdout.flush()
for line in sys.stdin:
    buffer.zero_()
    torch.cuda.synchronize()
    sys.stdout.write("done\\n"); sys.stdout.flush()
""".replace("ELEMENTS", str(FLUSH_ELEMENTS))

CASES = {
    "gelu 4096x65536": (lambda: torch.randn(4096, 65536, device="cuda"), torch.nn.functional.gelu),
    "gelu 1024x1024": (lambda: torch.randn(1024, 1024, device="cuda"), torch.nn.functional.gelu),
    "softmax 4096x4096": (
        lambda: torch.randn(4096, 4096, device="cuda"),
        lambda x: torch.softmax(x, -1),
    ),
    "matmul 4096": (lambda: torch.randn(4096, 4096, device="cuda"), lambda x: x @ x),
}


def main(out: Path, calls: int = 200) -> None:
    helper = subprocess.Popen(
        [sys.executable, "-c", HELPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert helper.stdout is not None and helper.stdin is not None
    helper.stdout.readline()
    own = torch.empty(FLUSH_ELEMENTS, device="cuda")
    rows = []
    for name, (make, op) in CASES.items():
        x = make()

        def run(op=op, x=x) -> torch.Tensor:
            return op(x)

        for _ in range(10):
            run()
        torch.cuda.synchronize()
        modes = ("own", "other", "idle")
        host: dict[str, list[float]] = {mode: [] for mode in modes}
        events: dict[str, list[float]] = {mode: [] for mode in modes}
        for index in range(len(modes) * calls):
            mode = modes[index % len(modes)]
            if mode != "other":
                own.zero_()
                torch.cuda.synchronize()
                if mode == "idle":  # the device idle for as long as a round of requests takes
                    time.sleep(0.005)
            else:
                helper.stdin.write("go\n")
                helper.stdin.flush()
                helper.stdout.readline()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            began = time.perf_counter()
            start.record()
            run()
            end.record()
            torch.cuda.synchronize()
            host[mode].append((time.perf_counter() - began) * 1e3)
            events[mode].append(start.elapsed_time(end))
        row = {"case": name}
        for mode in modes:
            row[f"host_ms_{mode}"] = statistics.median(host[mode])
            row[f"events_ms_{mode}"] = statistics.median(events[mode])
        row["switch_us"] = (row["host_ms_other"] - row["host_ms_own"]) * 1e3
        row["idle_us"] = (row["host_ms_idle"] - row["host_ms_own"]) * 1e3
        rows.append(row)
        print(json.dumps(row), flush=True)
        del x, run
    helper.stdin.close()
    helper.wait(timeout=30)
    out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
