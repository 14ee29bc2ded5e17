"""`python -m server.worker` at its edges: it takes `--fd N` and nothing else, and a first
stdin line that is not a job is answered on its pipe by one ErrorMessage, never a
traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from server.job_protocol import ErrorMessage, decode_message
from tests.conftest import ROOT


def _run(argv: list[str], stdin: str, **options) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "server.worker", *argv]
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=60, **options
    )


@pytest.mark.parametrize("argv", [[], ["--fd"], ["--fd", "x"], ["--fd", "3", "--verbose"]])
def test_the_worker_wants_its_fd_and_says_so_in_one_line(argv):
    done = _run(argv, "")
    assert done.returncode == 2
    assert done.stderr.strip().startswith("usage: python -m server.worker --fd N")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("stdin", "says"),
    [
        ("", "not JSON"),
        ("{not json\n", "not JSON"),
        ('{"kind": "dance", "target": "M"}\n', "unknown job kind"),
        (
            '{"kind": "optimize", "target": "M", "target_kind": "module", "synthesized": false,'
            ' "request": {"search": {"beam": "wide"}}}\n',
            "request",
        ),
    ],
)
def test_a_garbled_job_is_one_error_message_on_the_pipe(stdin, says):
    read_end, write_end = os.pipe()
    done = _run(["--fd", str(write_end)], stdin, pass_fds=(write_end,))
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        (line,) = pipe.read().splitlines()
    message = decode_message(line)
    assert done.returncode == 2 and isinstance(message, ErrorMessage)
    assert message.error.startswith("the worker received no job on stdin")
    assert says in message.error and "\n" not in message.error
    assert "Traceback" not in done.stderr
