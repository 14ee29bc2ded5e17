"""Pausing build children while a timing runs beside them.

Why: a build (imports, compiles, correctness trials) running next to a timing on the same
device disturbs it: on a 2-core machine a CPU timing ran 2-14x slower beside one build
(bench/RESULTS.md). Builds on a device are therefore stopped (SIGSTOP, every process the
child started, jail included) for as long as a timing holds that device's lane, and continued
(SIGCONT) after; the paused time does not count against the build's wall clock.
"""

from __future__ import annotations

import contextlib
import os
import signal

from agents.sandbox.inspect import descendants


def signal_tree(root: int, signum: int) -> list[int]:
    """Send `signum` to `root` and its descendants; twice over, so a process forked between
    the walk and the signal is caught too. Returns the pids signalled."""
    sent: set[int] = set()
    for _ in range(2):
        for pid in descendants(root):
            if pid in sent:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
                sent.add(pid)
    return sorted(sent)


def stop_tree(root: int) -> list[int]:
    return signal_tree(root, signal.SIGSTOP)


def continue_pids(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGCONT)
