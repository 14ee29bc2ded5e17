"""One timing per device across every kernel-agent process on this machine.

Why: each pool keeps its own timings apart, but two optimize jobs of the language server, or a
CLI run beside the editor, are separate processes with separate pools. A file lock per device
(fcntl.flock, in the user cache directory) makes the measure lane machine-wide; the kernel
drops it if its holder dies, so a crash never leaves a device locked. An evaluation outside
any pool (`kernel-agent eval`, the bench's baseline and head-to-head runs) takes the same lock
through `DeviceGate`, so it never times beside a pool's timing either.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import platformdirs

POLL_S = 0.05


def default_lock_dir() -> Path:
    return Path(platformdirs.user_cache_dir("kernel-agent")) / "locks"


class DeviceLock:
    """The machine-wide lock of one device ("cpu", "cuda-0", ...)."""

    def __init__(self, directory: Path, device: str) -> None:
        self.path = directory / f"measure-{device}.lock"
        self._fd: int | None = None

    def acquire(self, cancel: threading.Event | None = None) -> bool:
        """Wait for the device; False when `cancel` is set first."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if cancel is not None and cancel.is_set():
                    os.close(fd)
                    return False
                time.sleep(POLL_S)
                continue
            self._fd = fd
            return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def device_key(device: str, child_env: Mapping[str, str] | None = None) -> str:
    """The physical device a child times on, as the lock names it: "cpu" or "cuda-N", where N
    is the GPU the child is pinned to, else this process's first visible GPU, else 0."""
    if device == "cpu":
        return "cpu"
    pinned = (child_env or {}).get("CUDA_VISIBLE_DEVICES")
    if pinned is None:
        pinned = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"
    return f"cuda-{pinned}"


class DeviceGate:
    """The MeasureGate of an evaluation outside any pool: it only takes the device's
    machine-wide lock for the child's timing."""

    def __init__(self, device: str, directory: Path | None = None) -> None:
        self._lock = DeviceLock(directory or default_lock_dir(), device_key(device))

    @property
    def env(self) -> dict[str, str]:
        return {}

    def started(self, pid: int) -> None:
        pass

    def acquire(self, cancel: threading.Event | None) -> bool:
        return self._lock.acquire(cancel)

    def release(self) -> None:
        self._lock.release()
