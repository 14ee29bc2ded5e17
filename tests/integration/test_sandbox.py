"""The sandbox holds against a hostile candidate: no network, no writes outside its directory,
no credentials, and the parent survives whatever the child does."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from agents.sandbox.env import is_sensitive, scrubbed_environment
from agents.verify.verdict import Verdict
from tests.conftest import candidate_source, requires_jail, run_eval

HONEST_FORWARD = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
{body}
        return torch.relu(self.linear(x))
"""


def hostile(body: str) -> str:
    indented = "\n".join("        " + line for line in body.strip().splitlines())
    return HONEST_FORWARD.format(body=indented)


class Listener:
    """A loopback TCP listener that records whether anybody connected."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
                self.connections += 1
                conn.close()
            except OSError:
                continue

    def close(self):
        self._stop.set()
        self._thread.join()
        self.sock.close()


@requires_jail
def test_candidate_cannot_reach_a_loopback_listener():
    listener = Listener()
    try:
        body = f"""
import socket
s = socket.create_connection(("127.0.0.1", {listener.port}), timeout=2)
s.sendall(b"stolen")
"""
        result = run_eval("linear_relu.py", candidate_source(hostile(body)), static_check=False)
    finally:
        listener.close()
    assert listener.connections == 0
    assert result.verdict is Verdict.RUNTIME_ERROR
    assert "bubblewrap" in result.isolation


@requires_jail
def test_candidate_cannot_create_a_file_outside_its_directory(tmp_path: Path):
    targets = [tmp_path / "escaped.txt", Path.home() / "kernel-agent-escaped.txt"]
    writes = "\n".join(
        f"""
try:
    open({str(target)!r}, "w").write("escaped")
except OSError:
    pass
"""
        for target in targets
    )
    result = run_eval("linear_relu.py", candidate_source(hostile(writes)), static_check=False)
    assert result.verdict is Verdict.CORRECT  # it ran, and its writes went nowhere
    for target in targets:
        assert not target.exists()


@requires_jail
def test_candidate_cannot_read_a_credential(monkeypatch, tmp_path: Path):
    secret = "sk-ant-test-0123456789abcdef"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    monkeypatch.setenv("MY_SERVICE_TOKEN", secret)
    secret_file = Path.home() / ".kernel-agent-test-credentials"
    secret_file.write_text(secret)
    try:
        body = f"""
import glob, os
found = [v for v in os.environ.values() if "sk-ant" in v]
for path in glob.glob("/proc/*/environ") + [{str(secret_file)!r}]:
    try:
        data = open(path, "rb").read().decode("latin-1")
    except OSError:
        continue
    if "sk-ant" in data:
        found.append(data[data.index("sk-ant"):][:40])
raise RuntimeError("FOUND:" + "|".join(found))
"""
        result = run_eval("linear_relu.py", candidate_source(hostile(body)), static_check=False)
    finally:
        secret_file.unlink()
    text = " ".join(result.reasons)
    assert "FOUND:" in text  # the candidate ran and reported what it saw
    assert secret not in text


def test_scrubbed_environment_drops_every_credential(tmp_path: Path):
    source = {
        "PATH": "/usr/bin",
        "ANTHROPIC_API_KEY": "a",
        "OPENAI_BASE_URL": "http://x",
        "GITHUB_TOKEN": "t",
        "DB_PASSWORD": "p",
        "AWS_SECRET_ACCESS_KEY": "s",
        "HF_HOME": "/h",
        "LANG": "C.UTF-8",
    }
    env = scrubbed_environment(tmp_path, tmp_path / "cache", threads=2, source=source)
    assert env["PATH"] == "/usr/bin" and env["LANG"] == "C.UTF-8"
    for name in (
        "ANTHROPIC_API_KEY",
        "OPENAI_BASE_URL",
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "HF_HOME",
    ):
        assert name not in env
    assert env["HOME"].startswith(str(tmp_path))
    assert env["TORCH_EXTENSIONS_DIR"].startswith(str(tmp_path / "cache"))
    assert is_sensitive("my_api_key") and not is_sensitive("PATH")


def test_inductor_compiles_in_process_whatever_the_threads(tmp_path: Path):
    """More compile threads start Inductor's compile-worker processes, which outlive the call:
    the reviewer would refuse every torch.compile candidate as leaving processes behind."""
    env = scrubbed_environment(tmp_path, tmp_path / "cache", threads=6, source={})
    assert env["TORCHINDUCTOR_COMPILE_THREADS"] == "1" and env["OMP_NUM_THREADS"] == "6"
    assert env["TORCHINDUCTOR_CACHE_DIR"].startswith(str(tmp_path / "cache"))


def test_without_a_jail_the_verdict_says_which_isolation_applied():
    result = run_eval("linear_relu.py", "linear_relu_honest.py", jail=False)
    assert result.verdict is Verdict.CORRECT
    assert result.isolation.startswith("no jail (--no-jail)")
    assert "seccomp filter" in result.isolation and "kill filter" in result.isolation


def test_parent_survives_a_child_that_kills_its_own_process_group():
    body = """
import os, signal
os.killpg(0, signal.SIGKILL)
"""
    result = run_eval("linear_relu.py", candidate_source(hostile(body)), static_check=False)
    assert result.verdict is Verdict.RUNTIME_ERROR


def test_output_flood_on_stdout_is_bounded_and_harmless():
    body = """
import sys
for _ in range(2000):
    sys.stdout.write("x" * 10000 + "\\n")
"""
    result = run_eval("linear_relu.py", candidate_source(hostile(body)), static_check=False)
    assert result.verdict is Verdict.CORRECT
