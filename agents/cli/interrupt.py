"""Ctrl-C (SIGINT) and SIGTERM as a cancel, for the commands that run for minutes.

Why not KeyboardInterrupt: it lands wherever the main thread happens to be, which can be in
the middle of writing a report, and it never reaches the sandboxed workers. Instead the
first signal cancels the run's token (every sandbox watches that event and kills its worker),
the command writes what it has, and exits 128 + the signal's number (130 for SIGINT, 143 for
SIGTERM), as a shell would report it. A second signal stops at once. The promise is an end
within 5 s: should the orderly path hang (a worker deaf to its kill, a pool that will not
close), a watchdog kills every process this one started and exits at `GRACE_S`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from agents.search.budget import CancelToken

SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 4.5  # the orderly end's time before the watchdog ends the process
SIGNAL_WORDS = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "terminated (SIGTERM)"}


class Interrupts:
    """While active, SIGINT and SIGTERM cancel `token` and `say` a line; `exit_code` is then
    the status the command should end with. Only the main thread may install handlers, so
    elsewhere (a test calling the command in a thread) it does nothing."""

    def __init__(self, token: CancelToken, say: Callable[[str], None]) -> None:
        self.token = token
        self.say = say
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._watchdog: threading.Timer | None = None

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.getsignal(signum)
                signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:  # a second signal: stop now
            self.__exit__()
            raise KeyboardInterrupt
        self.signum = signum
        words = SIGNAL_WORDS.get(signal.Signals(signum), signal.Signals(signum).name)
        self.token.cancel(words)
        self._watchdog = threading.Timer(GRACE_S, self._force_exit)
        self._watchdog.daemon = True
        self._watchdog.start()
        self.say(f"{words}: stopping the workers and writing what is done so far")

    def _force_exit(self) -> None:
        """The orderly end hung: kill what this process started, and exit."""
        for pid in descendants(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self.say("the workers did not stop in time: killed")
        os._exit(self.exit_code(1))

    @property
    def interrupted(self) -> bool:
        return self.signum is not None

    def exit_code(self, otherwise: int) -> int:
        """128 + the signal's number once one arrived, else `otherwise`."""
        return 128 + self.signum if self.signum is not None else otherwise


def descendants(root: int) -> list[int]:
    """Every living process below `root`, at any depth (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    frontier = [root]
    while frontier:
        below = children.get(frontier.pop(), [])
        found.extend(below)
        frontier.extend(below)
    return found
