"""The L2 flush before each timed run on the GPU, issued by the parent and timed from its host.

Why the parent: the flush cannot be left to the candidate (it could skip it), and a flush
issued by the reference's process reaches the candidate's run with a GPU context switch in
front of it (about 130 us on an H200, bench/cuda_context_switch.py) that the reference's own
runs never pay. Issued by a third context, the parent's, every timed run and every overhead
request starts alike: after a switch. Timed from the host (launch to synchronize), the flush
also waits for any work another context left on the device, which events inside the flushing
context do not see (they start only once that context is scheduled): the canary for work a
candidate leaves running after its reply.
"""

from __future__ import annotations

import threading
import time

L2_FLUSH_BYTES = 256 * 1024 * 1024
"""What KernelBench writes between timed runs; several times the L2 of any current GPU."""

_lock = threading.Lock()
_buffer = None


def flush_ms() -> float:
    """Overwrite L2_FLUSH_BYTES on the current CUDA device; host milliseconds, launch to done."""
    global _buffer
    import torch

    with _lock:
        if _buffer is None:
            _buffer = torch.empty(L2_FLUSH_BYTES // 4, device="cuda")
            torch.cuda.synchronize()
        began = time.perf_counter()
        _buffer.zero_()
        torch.cuda.synchronize()
        return (time.perf_counter() - began) * 1e3
