"""The machine's own limits: memory bandwidth and matmul throughput, measured and cached.

A roofline is only as honest as its ceilings, so they are measured on this machine (not
taken from a spec sheet) once per hardware and thread count, and cached as JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import platformdirs
import torch

from agents.profile.report import Ceilings

CACHE_VERSION = 2
CPU_COPY_BYTES = 256 * 1024**2
CUDA_COPY_BYTES = 1024**3
CPU_MATMUL_N = 2048
CUDA_MATMUL_N = 8192
WARMUP, RUNS = 2, 5


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("kernel-agent"))


def hardware_name(device: str) -> str:
    """The GPU's name, or the CPU's model name from /proc/cpuinfo."""
    if device == "cuda":
        return torch.cuda.get_device_name()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    import platform

    return platform.processor() or platform.machine() or "cpu"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def cache_path(device: str, threads: int, cache_dir: Path | None = None) -> Path:
    name = f"{slug(hardware_name(device))}-{threads}.json"
    return (cache_dir or default_cache_dir()) / "ceilings" / name


def get_ceilings(
    device: str, threads: int, refresh: bool = False, cache_dir: Path | None = None
) -> Ceilings:
    """Cached ceilings for this hardware and thread count; measured when missing or asked."""
    path = cache_path(device, threads, cache_dir)
    if not refresh:
        cached = _read(path, device, threads)
        if cached is not None:
            return cached
    ceilings = measure_ceilings(device, threads)
    _write(path, ceilings)
    return ceilings


def _read(path: Path, device: str, threads: int) -> Ceilings | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("cache_version") != CACHE_VERSION:
            return None
        ceilings = Ceilings.from_json(data["ceilings"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if ceilings.device != device or ceilings.threads != threads:
        return None
    return ceilings


def _write(path: Path, ceilings: Ceilings) -> None:
    """Atomically, so a concurrent reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    payload = {"cache_version": CACHE_VERSION, "ceilings": ceilings.to_json()}
    temporary.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    os.replace(temporary, path)


def measure_ceilings(device: str, threads: int) -> Ceilings:
    """Median bandwidth of a large copy and median throughput of a large fp32 matmul (and TF32
    and bf16 on a GPU), after warm-up. About 2 s on a CPU, 1 s on a GPU."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        if device == "cuda":
            bandwidth, fp32, tf32, bf16 = _measure_cuda()
        else:
            bandwidth, fp32, tf32, bf16 = _measure_cpu(), _matmul_cpu(), None, None
    finally:
        torch.set_num_threads(previous)
    return Ceilings(
        device=device,
        name=hardware_name(device),
        threads=threads,
        memory_gbps=round(bandwidth, 3),
        matmul_gflops=round(fp32, 3),
        bf16_gflops=None if bf16 is None else round(bf16, 3),
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        tf32_gflops=None if tf32 is None else round(tf32, 3),
    )


def _median_seconds(call: Callable[[], object]) -> float:
    for _ in range(WARMUP):
        call()
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _measure_cpu() -> float:
    """GB/s counting bytes read plus bytes written."""
    source = torch.ones(CPU_COPY_BYTES // 4, dtype=torch.float32)
    target = torch.empty_like(source)
    seconds = _median_seconds(lambda: target.copy_(source))
    return 2 * CPU_COPY_BYTES / seconds / 1e9


def _matmul_cpu() -> float:
    n = CPU_MATMUL_N
    a = torch.randn(n, n)
    b = torch.randn(n, n)
    out = torch.empty(n, n)
    seconds = _median_seconds(lambda: torch.mm(a, b, out=out))
    return 2 * n**3 / seconds / 1e9


def _measure_cuda() -> tuple[float, float, float, float]:
    """Bandwidth, then fp32 (TF32 off), TF32 and bf16 matmul rates."""
    source = torch.ones(CUDA_COPY_BYTES // 4, dtype=torch.float32, device="cuda")
    target = torch.empty_like(source)
    seconds = _cuda_seconds(lambda t=target, s=source: t.copy_(s))
    bandwidth = 2 * CUDA_COPY_BYTES / seconds / 1e9
    del source, target
    rates = []
    matmul = torch.backends.cuda.matmul
    allowed = matmul.allow_tf32
    try:
        for dtype, tf32 in ((torch.float32, False), (torch.float32, True), (torch.bfloat16, False)):
            matmul.allow_tf32 = tf32
            rates.append(_matmul_cuda(dtype) / 1e9)
    finally:
        matmul.allow_tf32 = allowed
    torch.cuda.empty_cache()
    return bandwidth, rates[0], rates[1], rates[2]


def _matmul_cuda(dtype: torch.dtype) -> float:
    n = CUDA_MATMUL_N
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    out = torch.empty(n, n, device="cuda", dtype=dtype)
    return 2 * n**3 / _cuda_seconds(lambda: torch.mm(a, b, out=out))


def _cuda_seconds(call: Callable[[], object]) -> float:
    """Median of CUDA-event timings: the device's own clock, no host jitter."""
    for _ in range(WARMUP):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(RUNS):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)
