"""What a worker's processes are doing, read from outside through /proc.

Why from outside: a check that runs inside the candidate's process can be patched by the
candidate. The parent reads the kernel's view instead: which processes the jail holds, which
threads the worker has and how much CPU each used (and a whole tree, where no cgroup counts
it), whether a process is stopped, and its CPU affinity.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

SETTLE_S = 0.02
"""How long after a reply a thread may still spin: OpenMP's pool spins for up to ~15 ms after
a parallel region (libgomp's default spin count of PAUSE instructions) before it sleeps."""
BUSY_WINDOW_S = 0.01
BUSY_CPU_NS = 5_000_000
"""A thread that uses half of the window after that is working: a worker thread computing
after the reply, or a hog started to slow whatever runs beside it."""


def descendants(root: int) -> list[int]:
    """`root` and every process below it (by parent pid), read from /proc."""
    children: dict[int, list[int]] = {}
    try:
        entries = list(Path("/proc").iterdir())
    except OSError:  # no /proc (not Linux): the child alone
        return [root]
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def live_tree(root: int) -> list[int]:
    """`root` and every process below it, read from each process's `children` files: a few
    small reads, where a walk of all /proc would evict the caches of a timing. Falls back
    to `descendants` on a kernel without those files."""
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return descendants(root) if os.path.exists(f"/proc/{root}") else []
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                    todo.extend(int(word) for word in handle.read().split())
            except (OSError, ValueError):
                continue
    return found


def is_stopped(pid: int) -> bool:
    """Stopped by a signal (state T), or gone: it runs no more until it is continued."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"T", b"t", b"Z", b"X")


def tree_cpu_ns(pids: list[int]) -> int:
    """CPU nanoseconds of the given processes' threads, plus what their reaped children
    used (cutime + cstime): where no cgroup counts a tree's CPU for us."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0
    for pid in pids:
        total += sum(threads(pid).values())
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[-1].split()
            total += (int(fields[13]) + int(fields[14])) * 1_000_000_000 // ticks
        except (OSError, ValueError, IndexError):
            continue
    return total


def namespace_pid(pid: int) -> int | None:
    """The pid a process sees for itself (its innermost PID namespace's), from NSpid."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return pid


def find_worker(root: int, own_pid: int) -> int | None:
    """The host pid of the worker process that reported `own_pid` for itself (inside a
    jail's PID namespace the two differ)."""
    for pid in descendants(root):
        if namespace_pid(pid) == own_pid and _comm(pid) != "bwrap":
            return pid
    return None


def run_delays(pids: list[int]) -> dict[tuple[int, int], int]:
    """(pid, thread id) -> nanoseconds that thread spent runnable but waiting for a CPU
    (schedstat's second field): where no cgroup keeps a pressure account for a tree."""
    return {(pid, tid): fields[1] for pid in pids for tid, fields in _schedstats(pid).items()}


def threads(pid: int) -> dict[int, int]:
    """Thread id -> CPU nanoseconds used so far, for one process."""
    return {tid: fields[0] for tid, fields in _schedstats(pid).items()}


def _schedstats(pid: int) -> dict[int, tuple[int, int]]:
    """Thread id -> (CPU ns run, ns waited on a run queue), for one process's threads."""
    found: dict[int, tuple[int, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
            found[int(tid)] = (int(fields[0]), int(fields[1]))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _comm(pid: int, tid: int | None = None) -> str:
    path = f"/proc/{pid}/task/{tid}/comm" if tid else f"/proc/{pid}/comm"
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "?"


@dataclass(frozen=True)
class Baseline:
    """The worker as it stood after its build: processes and threads that may stay."""

    processes: frozenset[int]
    threads: frozenset[int]


def baseline(root: int, worker: int) -> Baseline:
    return Baseline(frozenset(descendants(root)), frozenset(threads(worker)))


def leftover_work(root: int, worker: int, before: Baseline, threads_too: bool = True) -> list[str]:
    """Processes the worker left alive beyond its baseline, and (with `threads_too`, which
    costs SETTLE_S + BUSY_WINDOW_S) threads still working well after its reply."""
    found = []
    extra = sorted(set(descendants(root)) - before.processes)
    if extra:
        names = ", ".join(f"{_comm(pid)}[{pid}]" for pid in extra[:5])
        found.append(f"candidate left child processes running: {names}")
    if threads_too:
        time.sleep(SETTLE_S)
        now = {tid: used for tid, used in threads(worker).items() if tid != worker}
        time.sleep(BUSY_WINDOW_S)
        after = threads(worker)
        busy = [tid for tid, used in now.items() if after.get(tid, used) - used > BUSY_CPU_NS]
        if busy:
            names = ", ".join(f"{_comm(worker, tid)}[{tid}]" for tid in busy[:5])
            found.append(f"candidate left threads working after it returned: {names}")
    return found


def affinity(pid: int) -> list[int] | None:
    """The CPUs a process may run on (None where the kernel will not say)."""
    try:
        return sorted(os.sched_getaffinity(pid))
    except (OSError, AttributeError):
        return None
