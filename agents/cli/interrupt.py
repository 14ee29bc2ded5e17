"""Ctrl-C (SIGINT) and SIGTERM as a cancel, for the commands that run for minutes.

Why not KeyboardInterrupt: it lands wherever the main thread happens to be, which can be in
the middle of writing a report, and it never reaches the sandboxed workers. Instead the
first signal cancels the run's token (every sandbox watches that event and kills its worker),
the command writes what it has, and exits 128 + the signal's number (130 for SIGINT, 143 for
SIGTERM), as a shell would report it. A second signal stops at once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from agents.search.budget import CancelToken

SIGNALS = (signal.SIGINT, signal.SIGTERM)
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

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.getsignal(signum)
                signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
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
        self.say(f"{words}: stopping the workers and writing what is done so far")

    @property
    def interrupted(self) -> bool:
        return self.signum is not None

    def exit_code(self, otherwise: int) -> int:
        """128 + the signal's number once one arrived, else `otherwise`."""
        return 128 + self.signum if self.signum is not None else otherwise
