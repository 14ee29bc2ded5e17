"""How many of this process's CPUs other work leaves free: a timing's default thread count.

Why: a thread pool as wide as the machine is timed badly beside any other work. Each
parallel op ends at a barrier that waits for the pool's slowest thread, and a thread the
scheduler gave away costs the op a whole time slice: a short kernel pays it on every op, a
long one barely notices. Beside two busy loops on this 2-core machine, the demo's e-graph
rewrite (0.6 ms alone) timed at 21 ms with 2 threads, its reference at 21 ms too (1.00x),
where 1 thread measured 4.65 against 0.62 ms (7.5x); issue 34's "0.50x slower" was this.
One thread per free CPU keeps both sides' slowdown proportional, so their ratio holds.
"""

from __future__ import annotations

import os
import time

SAMPLE_S = 0.3
"""How long the CPUs' idle time is watched: long enough to see a busy loop, short enough to
pay once per search."""


def allowed_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:
        return list(range(os.cpu_count() or 1))


def free_cpus(sample_s: float = SAMPLE_S) -> int:
    """CPUs of our affinity that were idle over the next `sample_s` seconds, rounded, at
    least 1; all of them where /proc/stat cannot be read."""
    cpus = allowed_cpus()
    try:
        before = read_stat()
        time.sleep(sample_s)
        after = read_stat()
    except (OSError, ValueError):
        return len(cpus)
    return free_from(before, after, cpus)


def read_stat() -> dict[int, tuple[int, int]]:
    """CPU number -> (idle ticks, all ticks) from /proc/stat's per-CPU lines."""
    with open("/proc/stat", encoding="ascii") as handle:
        return parse_stat(handle.read())


def parse_stat(text: str) -> dict[int, tuple[int, int]]:
    found: dict[int, tuple[int, int]] = {}
    for line in text.splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        ticks = [int(field) for field in fields[:8]]  # user..steal; guests are inside user
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
        found[int(name[3:])] = (idle, sum(ticks))
    return found


def free_from(
    before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]], cpus: list[int]
) -> int:
    """The idle share of each allowed CPU between two readings, summed and rounded."""
    idle = 0.0
    for cpu in cpus:
        if cpu not in before or cpu not in after:
            idle += 1.0  # not in /proc/stat (offline, or hidden): assume it free
            continue
        idle_ticks = after[cpu][0] - before[cpu][0]
        all_ticks = after[cpu][1] - before[cpu][1]
        idle += idle_ticks / all_ticks if all_ticks > 0 else 1.0
    return max(1, min(len(cpus), int(idle + 0.5)))
