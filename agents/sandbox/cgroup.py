"""A cgroup v2 of its own for each sandboxed worker: frozen, counted and killed as one.

Why: stopping a worker by signalling a list of pids misses every process it forks after the
list was read, and such a process burns the cores while the other side is timed. The
kernel's freezer stops every task of a cgroup, present and future; `cpu.stat` counts the CPU
of every task that ever ran in it, exited ones included; `cgroup.kill` ends them all at once.

The worker's cgroup is made below this process's own cgroup v2 (found from
/proc/self/mountinfo and /proc/self/cgroup) and the child joins it in its preexec, as root,
before it drops its user or forks: no process of the worker ever runs outside it. Its files
stay root's, so the candidate can neither thaw itself nor leave. Where no cgroup can be had
(cgroup v1 only, a read-only cgroupfs, no permission, a kernel without the freezer) `probe`
says why in one line and the caller falls back to signals (agents/sandbox/inspect.py).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import select
import signal
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "kernel-agent-"
FREEZE_WAIT_S = 2.0
"""How long a freeze may take to settle: a task in an uninterruptible wait (a driver call)
freezes when it returns. Past this the caller goes on; the CPU count tells if it ran."""
_names = itertools.count()


@dataclass(frozen=True)
class Probe:
    """Where workers' cgroups are made (`parent`), or why none can be (`reason`)."""

    parent: Path | None
    reason: str = ""


def _own_cgroup_dir(mountinfo: str, own_cgroup: str) -> Path | None:
    """This process's cgroup v2 directory: the cgroup2 mount whose root holds our
    `0::/path` line (a hybrid layout mounts it at /sys/fs/cgroup/unified)."""
    path = next(
        (line[3:].strip() for line in own_cgroup.splitlines() if line.startswith("0::")), None
    )
    if path is None:
        return None
    for line in mountinfo.splitlines():
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not rest.startswith("cgroup2 "):
            continue
        root, mountpoint = parts[3], parts[4].replace("\\040", " ")
        relative = os.path.relpath(path, root)
        if relative == "." or not relative.startswith(".."):
            return Path(mountpoint, relative).resolve()
    return None


@functools.cache
def probe() -> Probe:
    """Find a cgroup v2 directory we may make children in, with the freezer and CPU
    accounting, by making one. Cached: the answer does not change while we run."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
        own = Path("/proc/self/cgroup").read_text()
    except OSError:
        return Probe(None, "no /proc to find a cgroup in")
    parent = _own_cgroup_dir(mountinfo, own)
    if parent is None:
        return Probe(None, "no cgroup v2 hierarchy is mounted")
    _sweep(parent)
    trial = parent / f"{PREFIX}probe-{os.getpid()}"
    try:
        trial.mkdir()
    except FileExistsError:
        pass
    except OSError as error:
        return Probe(None, f"cannot make a cgroup in {parent} ({error.strerror})")
    try:
        missing = [
            name
            for name in ("cgroup.freeze", "cgroup.events", "cpu.stat", "cgroup.procs")
            if not (trial / name).exists()
        ]
        if missing:
            return Probe(None, f"the kernel's cgroup v2 lacks {', '.join(missing)}")
        return Probe(parent)
    finally:
        with contextlib.suppress(OSError):
            trial.rmdir()


def _sweep(parent: Path) -> None:
    """Remove empty cgroups a killed parent of ours left behind (their pid is gone)."""
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            owner = entry.name[len(PREFIX) :].split("-")[0]
            if entry.name.startswith(PREFIX) and owner.isdigit() and not _exists(int(owner)):
                with contextlib.suppress(OSError):
                    entry.rmdir()


def _exists(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


class WorkerCgroup:
    """One worker's cgroup. The parent opens `join_fd` before the fork; the child writes
    its own pid into it (`join`) before anything else."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.frozen = False

    @classmethod
    def create(cls) -> WorkerCgroup | None:
        """A fresh cgroup under `probe().parent`; None where there is none."""
        parent = probe().parent
        if parent is None:
            return None
        path = parent / f"{PREFIX}{os.getpid()}-{next(_names)}"
        try:
            path.mkdir()
        except OSError:
            return None
        return cls(path)

    def join_fd(self) -> int:
        return os.open(self.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

    @staticmethod
    def join(fd: int) -> None:
        """In the forked child: move this process into the cgroup ("0" is the writer)."""
        os.write(fd, b"0")

    def holds(self, pid: int) -> bool:
        return pid in self.pids()

    def pids(self) -> list[int]:
        """Every process in the cgroup, as host pids."""
        try:
            text = (self.path / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(word) for word in text.split()]

    def cpu_seconds(self) -> float | None:
        """CPU time of every task that ever ran in the cgroup (exited ones included)."""
        try:
            with open(self.path / "cpu.stat", "rb") as handle:
                first = handle.readline().split()
        except OSError:
            return None
        if len(first) != 2 or first[0] != b"usage_usec":
            return None
        return int(first[1]) / 1e6

    def cpu_wait_seconds(self) -> float | None:
        """Wall seconds during which no task of the cgroup ran while some were runnable (its
        cpu.pressure "full" total): time the scheduler took from it, not time its code spent.
        Not "some": with a thread running beside one that waits, the tree still progresses."""
        try:
            with open(self.path / "cpu.pressure", "rb") as handle:
                lines = handle.read().splitlines()
            full = next(line for line in lines if line.startswith(b"full "))
            return int(full.split(b"total=")[1].split()[0]) / 1e6
        except (OSError, IndexError, ValueError, StopIteration):
            return None

    def freeze(self, wait_s: float = FREEZE_WAIT_S) -> bool:
        """Freeze every task, and wait until the kernel says they all are."""
        self._write("cgroup.freeze", b"1")
        self.frozen = True
        return self._wait_event(b"frozen", b"1", wait_s)

    def thaw(self) -> None:
        self._write("cgroup.freeze", b"0")
        self.frozen = False

    def kill(self) -> None:
        """SIGKILL every task (cgroup.kill; on kernels before 5.14, each pid, frozen
        first so that none forks meanwhile)."""
        if (self.path / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                self._write("cgroup.kill", b"1")
            return
        with contextlib.suppress(OSError):
            self.freeze(wait_s=0.5)
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.thaw()

    def remove(self, wait_s: float = 5.0) -> None:
        """Kill what is left and remove the cgroup once it is empty."""
        self.kill()
        self._wait_event(b"populated", b"0", wait_s)
        with contextlib.suppress(OSError):
            self.path.rmdir()

    def _write(self, name: str, value: bytes) -> None:
        fd = os.open(self.path / name, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, value)
        finally:
            os.close(fd)

    def _wait_event(self, key: bytes, value: bytes, wait_s: float) -> bool:
        """Wait until cgroup.events says `key value` (the kernel signals a change as
        POLLPRI on the open file)."""
        try:
            fd = os.open(self.path / "cgroup.events", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        deadline = time.monotonic() + wait_s
        try:
            poller = select.poll()
            poller.register(fd, select.POLLPRI)
            while True:
                os.lseek(fd, 0, os.SEEK_SET)
                for line in os.read(fd, 4096).splitlines():
                    words = line.split()
                    if len(words) == 2 and words[0] == key and words[1] == value:
                        return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                poller.poll(min(remaining, 0.05) * 1000)
        except OSError:
            return False
        finally:
            os.close(fd)
