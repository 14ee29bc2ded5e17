"""What this machine can give an evaluation: free memory on the host or the device, and the
sandbox's address-space cap. Read inside the worker, so it sees the limits it runs under."""

from __future__ import annotations

import re
import resource
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Capacity:
    """Memory an evaluation may use, and the worker's own cap (None: no cap)."""

    memory_bytes: int
    memory_what: str  # "available memory" or "free memory on cuda"
    worker_bytes: int | None = None  # the address-space cap left to this worker

    def to_json(self) -> dict[str, object]:
        return {
            "memory_bytes": self.memory_bytes,
            "memory_what": self.memory_what,
            "worker_bytes": self.worker_bytes,
        }


def capacity(device: str) -> Capacity | None:
    """None when it cannot be read (a check then lets the problem run)."""
    if device == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info()
        return Capacity(int(free), "free memory on cuda")  # no address-space cap on cuda
    available = _meminfo("MemAvailable")
    if available is None:
        return None
    return Capacity(available, "available memory", _address_space_left())


def _meminfo(field: str) -> int | None:
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    found = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else None


def _address_space_left() -> int | None:
    """RLIMIT_AS less what this process has mapped already (torch maps gigabytes)."""
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit == resource.RLIM_INFINITY:
        return None
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return limit
    found = re.search(r"^VmSize:\s+(\d+) kB", status, re.MULTILINE)
    return max(limit - (int(found.group(1)) * 1024 if found else 0), 0)
