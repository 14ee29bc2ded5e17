"""One timing per device across every kernel-agent process on this machine.

Why: each pool keeps its own timings apart, but two optimize jobs of the language server, or a
CLI run beside the editor, are separate processes with separate pools. A file lock per device
(fcntl.flock, in the user cache directory) makes the measure lane machine-wide; the kernel
drops it if its holder dies, so a crash never leaves a device locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
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
