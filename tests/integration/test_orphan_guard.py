"""The guard in tests/conftest.py that fails a test leaving a sandboxed process behind must
recognise a real sandboxed child's command line: once the bootstrap changed and the guard,
matching the old text, silently saw nothing."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from agents.sandbox.process import child_bootstrap, project_root
from tests.conftest import orphaned_sandboxes


def test_an_orphaned_sandboxed_child_is_found():
    program = child_bootstrap("import time; time.sleep(60)")
    # A shell starts the child in the background and exits: the child is reparented, as a
    # candidate's process is when whatever started it dies first.
    shell = subprocess.run(
        ["sh", "-c", '"$0" -I -c "$1" "$2" > /dev/null 2>&1 & echo $!', sys.executable, program,
         str(project_root())],
        capture_output=True,
        text=True,
        timeout=30,
    )  # fmt: skip
    pid = int(shell.stdout.split()[0])
    try:
        deadline = time.monotonic() + 10
        while pid not in orphaned_sandboxes() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pid in orphaned_sandboxes()
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
