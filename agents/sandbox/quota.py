"""Quotas a sandboxed child cannot raise from inside: its cache and scratch directories' sizes
in bytes and in entries (files, folders and links: a tree of a hundred thousand empty files
costs the host inodes and every later walk, and almost no bytes) and, where RLIMIT_NPROC does
not hold (a child whose processes belong to root), its number of tasks. One monitor thread
serves every live child: it reads /proc once per tick for all of them and walks each watched
directory about once a second, counting no further than the quota. A child over a quota has
its whole process group killed and the reason recorded.

The root of every source's cache, and its sweep, are agents/sandbox/caches.py.
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


@dataclass(frozen=True)
class Usage:
    """What a tree holds: bytes on disk, and entries (files, folders, links: inodes)."""

    bytes: int = 0
    entries: int = 0

    def over(self, max_bytes: int | None, max_entries: int | None) -> bool:
        return (max_bytes is not None and self.bytes > max_bytes) or (
            max_entries is not None and self.entries > max_entries
        )


def directory_usage(
    path: Path, max_bytes: int | None = None, max_entries: int | None = None
) -> Usage:
    """Bytes the tree under `path` occupies on disk (allocated blocks, so a sparse file costs
    what it uses) and its entries; symlinks are not followed. Stops counting as soon as either
    is above its maximum, so a watch over a tree of a million files costs what its limit does."""
    total = entries = 0
    byte_cap = max_bytes if max_bytes is not None else float("inf")
    entry_cap = max_entries if max_entries is not None else float("inf")
    stack = [str(path)]
    while stack:
        try:
            scanner = os.scandir(stack.pop())
        except OSError:
            continue
        with scanner:
            for entry in scanner:
                entries += 1
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += info.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                if total > byte_cap or entries > entry_cap:
                    return Usage(total, entries)
    return Usage(total, entries)


def empty_directory(path: Path) -> None:
    """Delete everything inside `path`, keeping `path` itself; links are removed, never
    followed."""
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


@dataclass(frozen=True)
class DirectoryQuota:
    """A directory the child may write, and how much of it: bytes and entries."""

    path: Path
    max_bytes: int
    max_entries: int
    label: str  # "cache" | "scratch"

    def breach(self) -> str | None:
        """One line naming the count that went over, or None while within the quota."""
        used = directory_usage(self.path, self.max_bytes, self.max_entries)
        if used.bytes > self.max_bytes:
            return (
                f"{self.label} over its quota ({used.bytes >> 20} MiB > {self.max_bytes >> 20} MiB)"
            )
        if used.entries > self.max_entries:
            return (
                f"{self.label} over its quota ({used.entries:,} files and folders counted, "
                f"more than {self.max_entries:,})"
            )
        return None


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
    directories: list[DirectoryQuota] = field(default_factory=list)
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
        for quota in self.directories:
            if (reason := quota.breach()) is not None:
                self.kill(reason, quota.label)


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
