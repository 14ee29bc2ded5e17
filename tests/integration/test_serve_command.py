"""`kernel-agent serve` reaches the language server's own command line.

Why: the old check (`serve --tcp nonsense` exits 2) could not fail, since argparse also exits 2
on a subcommand it does not know. Only the wired subcommand prints the server's flags in its
help and refuses a bad --tcp address with the server's own message; both are asserted through
the real entry point, whatever `serve` does inside (parse in-process or exec `python -m server`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

from tests.conftest import ROOT

KERNEL_AGENT = [sys.executable, "-m", "agents"]


def kernel_agent(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KERNEL_AGENT, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_serve_help_names_the_servers_own_flags():
    done = kernel_agent("serve", "--help")
    assert done.returncode == 0, done.stderr
    assert "language server" in done.stdout
    for flag in ("--stdio", "--tcp", "--max-message-bytes"):
        assert flag in done.stdout, f"{flag} missing from `serve --help`:\n{done.stdout}"


def test_serve_refuses_a_bad_address_with_the_servers_message():
    assert shutil.which(sys.executable)
    done = kernel_agent("serve", "--tcp", "nonsense")
    assert done.returncode == 2
    assert "--tcp wants HOST:PORT" in done.stderr, done.stderr
    assert "invalid choice" not in done.stderr


def test_an_unknown_subcommand_is_told_apart_from_serve():
    """The control: what the old test could not tell from a wired `serve`."""
    done = kernel_agent("serf", "--tcp", "nonsense")
    assert done.returncode == 2
    assert "--tcp wants HOST:PORT" not in done.stderr
    assert "invalid choice" in done.stderr
