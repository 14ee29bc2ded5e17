"""One error prefix across subcommands, through the real console script: whoever finds the
error (argparse, the CLI, the subcommand), the line reads `kernel-agent COMMAND: error: ...`,
is one line with no traceback, and a bad command line or file exits 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import CANDIDATES, PROBLEMS, ROOT
from tests.integration.test_cli import EXECUTABLE

REFERENCE, CANDIDATE = str(PROBLEMS / "linear_relu.py"), str(CANDIDATES / "linear_relu_honest.py")


def cli(*args: str) -> subprocess.CompletedProcess:
    command = [EXECUTABLE] if EXECUTABLE else [sys.executable, "-m", "agents"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


def bad_inputs(command: str, missing: str) -> list[tuple[str, ...]]:
    """A flag the command does not have, and a file that is not there."""
    files = (missing, CANDIDATE) if command == "eval" else (missing,)
    return [(command, *files, "--no-such-flag"), (command, *files)]


@pytest.mark.parametrize("command", ["eval", "optimize", "profile", "bench"])
def test_every_subcommand_reports_bad_input_with_one_prefix(command, tmp_path):
    missing = str(tmp_path / "missing.py")
    flag, file = (cli(*args) for args in bad_inputs(command, missing))
    for done, what in ((flag, "--no-such-flag"), (file, missing)):
        assert done.returncode == 2, (command, done.stderr)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith(f"kernel-agent {command}: error: "), done.stderr
        assert what in done.stderr, done.stderr
    assert f"(see `kernel-agent {command} --help`)" in flag.stderr  # its own help, not the top's
    assert f"{missing}: no such file" in file.stderr


def test_errors_before_a_command_is_known_use_the_bare_prefix():
    done = cli("frobnicate")
    assert done.returncode == 2
    assert done.stderr.startswith("kernel-agent: error: argument COMMAND: invalid choice")
    assert done.stderr.count("\n") == 1
