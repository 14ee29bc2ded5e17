"""Quotas a sandboxed child cannot raise from inside: its cache and scratch directories' sizes
and, where RLIMIT_NPROC does not hold (a child whose processes belong to root), its number of
tasks. One monitor thread serves every live child: it reads /proc once per tick for all of
them and walks each watched directory about once a second. A child over a quota has its whole
process group killed and the reason recorded.

`sweep_caches` keeps a root of per-source caches under a size, least recently used first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

TICK_S = 0.2
DIRECTORY_PERIOD_S = 1.0


def directory_bytes(path: Path, stop_above: int | None = None) -> int:
    """Bytes the tree under `path` occupies on disk (allocated blocks, so a sparse file costs
    what it uses); symlinks are not followed. Stops counting once above `stop_above`."""
    total = 0
    stack = [str(path)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += info.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
        if stop_above is not None and total > stop_above:
            break
    return total


def empty_directory(path: Path) -> None:
    """Delete everything inside `path`, keeping `path` itself."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def sweep_caches(root: Path, keep_bytes: int) -> list[Path]:
    """Delete the least recently used per-source cache directories directly under `root`
    until the rest fit in `keep_bytes`. A launch touches its cache directory, so its mtime
    is its last use. Returns what was deleted."""
    try:
        entries = [Path(entry.path) for entry in os.scandir(root) if entry.is_dir()]
    except OSError:
        return []
    sized = []
    for entry in entries:
        with contextlib.suppress(OSError):
            sized.append((entry.stat().st_mtime, directory_bytes(entry), entry))
    sized.sort()
    total = sum(size for _, size, _ in sized)
    deleted = []
    for _, size, entry in sized:
        if total <= keep_bytes:
            break
        shutil.rmtree(entry, ignore_errors=True)
        total -= size
        deleted.append(entry)
    return deleted


@dataclass
class ProcessTable:
    """One read of /proc: parent, session and thread count per process."""

    parent: dict[int, int] = field(default_factory=dict)
    session: dict[int, int] = field(default_factory=dict)
    threads: dict[int, int] = field(default_factory=dict)

    @classmethod
    def read(cls) -> ProcessTable:
        table = cls()
        try:
            names = os.listdir("/proc")
        except OSError:
            return table
        for name in names:
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as handle:
                    data = handle.read()
            except OSError:
                continue
            fields = data.rsplit(b")", 1)[-1].split()
            if len(fields) < 18:
                continue
            pid = int(name)
            table.parent[pid] = int(fields[1])
            table.session[pid] = int(fields[3])
            table.threads[pid] = int(fields[17])
        return table

    def tasks_below(self, root: int) -> int:
        """Threads of `root` and of every process below it."""
        children: dict[int, list[int]] = {}
        for pid, parent in self.parent.items():
            children.setdefault(parent, []).append(pid)
        total, todo = 0, [root]
        while todo:
            pid = todo.pop()
            total += self.threads.get(pid, 0)
            todo.extend(children.get(pid, ()))
        return total

    def tasks_in_session(self, session: int) -> int:
        return sum(self.threads[pid] for pid, sid in self.session.items() if sid == session)


def kill_session(session: int, rounds: int = 20) -> None:
    """SIGKILL every process of `session` (a child started in a session of its own, which the
    kill filter keeps it from leaving), read from /proc until none is left: a process may
    fork between one read and its kill, so read again. A jailed child needs none of this
    (its PID namespace dies with it)."""
    for _ in range(rounds):
        table = ProcessTable.read()
        members = [pid for pid, sid in table.session.items() if sid == session]
        if not members:
            return
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


@dataclass
class Watch:
    """What the monitor checks for one child; `reason` says why it was killed."""

    pid: int
    directories: list[tuple[Path, int, str]] = field(default_factory=list)
    max_tasks: int | None = None
    by_session: bool = False  # count the child's session (no jail), not its process tree
    reason: str | None = None
    over: set[str] = field(default_factory=set)
    _next_walk: float = 0.0

    def kill(self, reason: str, label: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.over.add(label)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        if self.by_session:
            kill_session(self.pid)

    def check_tasks(self, table: ProcessTable) -> None:
        if self.max_tasks is None:
            return
        count = table.tasks_in_session(self.pid) if self.by_session else table.tasks_below(self.pid)
        if count > self.max_tasks:
            self.kill(f"over the process cap ({count} tasks > {self.max_tasks})", "tasks")

    def check_directories(self, now: float) -> None:
        if now < self._next_walk:
            return
        self._next_walk = now + DIRECTORY_PERIOD_S
        for path, limit, label in self.directories:
            used = directory_bytes(path, stop_above=limit)
            if used > limit:
                self.kill(f"{label} over its quota ({used >> 20} MiB > {limit >> 20} MiB)", label)


class _Monitor:
    """The one thread that checks every registered Watch; it exits when none is left."""

    def __init__(self, read_table: Callable[[], ProcessTable] = ProcessTable.read) -> None:
        self._lock = threading.Lock()
        self._watches: list[Watch] = []
        self._thread: threading.Thread | None = None
        self._read_table = read_table

    def add(self, watch: Watch) -> None:
        with self._lock:
            self._watches.append(watch)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="kernel-agent-quota", daemon=True
                )
                self._thread.start()

    def remove(self, watch: Watch) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._watches.remove(watch)

    def _run(self) -> None:
        while True:
            with self._lock:
                watches = list(self._watches)
                if not watches:
                    self._thread = None
                    return
            table = self._read_table() if any(w.max_tasks for w in watches) else None
            now = time.monotonic()
            for watch in watches:
                if watch.reason is not None:
                    continue
                if table is not None:
                    watch.check_tasks(table)
                watch.check_directories(now)
            time.sleep(TICK_S)


MONITOR = _Monitor()
