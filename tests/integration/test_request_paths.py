"""The same `OptimizeRequest` searches alike through the CLI and through the server's worker.

Why: the worker used to re-parse the CLI's defaults, set editor settings on an argparse
namespace and write a temporary llm.toml, so an editor run and a terminal run could differ
in shape (plans, samples, iterations) without anyone noticing. Now both build one request
and call agents/request/run.py. Each case builds the request from the command line's words
(in process, as `kernel-agent optimize` does), runs `kernel-agent optimize` on those words
as a subprocess, and hands the same request, as JSON, to `python -m server.worker`; the two
searches must propose the same plans in the same order, with the same shape.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agents.cli import build_parser
from agents.cli.optimize import optimize_request
from agents.request.requests import OptimizeRequest
from server.job_protocol import (
    ErrorMessage,
    EventMessage,
    ResultMessage,
    Setup,
    WorkerJob,
    decode_message,
    encode,
)
from tests.conftest import ROOT
from tests.llm_server import ScriptedLLMServer, ScriptedReply, ScriptedRequest

PROBLEM = ROOT / "bench" / "problems" / "13_gemm_divide_sum_scaling.py"
PLANTED = (ROOT / "examples" / "gemm_divide_sum_scale_new.py").read_text()
FAST = ["--no-profile", "--no-memory", "--threads", "1", "--timing-budget", "0.3", "--no-jail"]
PLANS = [
    {"title": "Sum the weight rows before the GEMM", "method": "reduce-before-gemm"},
    {"title": "Fold the two scalings into one", "method": "fold-constants"},
]
KEY = "sk-ant-test-request-paths"


def _request(words: list[str]) -> OptimizeRequest:
    return optimize_request(build_parser().parse_args(["optimize", *words]))


def _plans_of(result: dict) -> list[tuple[int, str, str]]:
    """Every candidate's plan, in the order the search made them."""
    return [(c["iteration"], c["plan"], c["method"]) for c in result["candidates"]]


def _through_cli(words: list[str], tmp_path: Path, env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "agents", "optimize", *words, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _through_worker(request: OptimizeRequest, env: dict[str, str]) -> tuple[list, dict]:
    """The worker's messages (setup and events) and its result, for `request` as the job."""
    read_end, write_end = os.pipe()
    worker = subprocess.Popen(
        [sys.executable, "-m", "server.worker", "--fd", str(write_end)],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
        pass_fds=(write_end,),
    )
    os.close(write_end)
    stderr: list[str] = []
    threading.Thread(target=lambda: stderr.extend(worker.stderr), daemon=True).start()
    job = WorkerJob(request, target="Model", target_kind="module", synthesized=False)
    worker.stdin.write(encode(job.to_json()) + "\n")  # stdin stays open: its end cancels
    worker.stdin.flush()
    messages = []
    with os.fdopen(read_end, encoding="utf-8") as pipe:
        for line in pipe:
            message = decode_message(line)
            if isinstance(message, ErrorMessage):
                pytest.fail(f"the worker failed: {message.error}\n{''.join(stderr)[-2000:]}")
            if isinstance(message, ResultMessage):
                worker.stdin.close()
                assert worker.wait(timeout=60) == 0, "".join(stderr)[-2000:]
                return messages, message.result.to_json()
            messages.append(message)
    worker.kill()
    pytest.fail(f"the worker ended without a result:\n{''.join(stderr)[-2000:]}")


def _same_search(
    words: list[str], tmp_path: Path, env: dict[str, str], before_worker: Script | None = None
) -> list:
    """The plans both searches made (asserted equal), after checking both had one shape.
    `before_worker`: a scripted model to start again from its first plan."""
    request = _request(words)
    assert OptimizeRequest.from_json(json.loads(json.dumps(request.to_json()))) == request
    words = [*words, "--output", str(tmp_path / "out.py")]
    by_cli = _through_cli(words, tmp_path, env)
    if before_worker is not None:
        before_worker.plans_given = 0
    messages, by_worker = _through_worker(request, env)
    shape = request.resolved().search
    (setup,) = [m for m in messages if isinstance(m, Setup)]
    assert (setup.iterations, setup.samples) == (shape.iterations, shape.samples)
    events = [m.event for m in messages if isinstance(m, EventMessage)]
    started = events[0]
    assert started.kind == "started"
    assert (started.beam, started.plans, started.samples, started.iterations) == (
        shape.beam,
        shape.plans,
        shape.samples,
        shape.iterations,
    )
    planned = [(e.iteration, e.title) for e in events if e.kind == "plan"]
    assert _plans_of(by_worker) == _plans_of(by_cli)
    assert planned == list(dict.fromkeys((i, title) for i, title, _ in _plans_of(by_cli)))
    assert by_worker["iterations"] == by_cli["iterations"]
    assert (by_worker["planner"], by_worker["executor"]) == (by_cli["planner"], by_cli["executor"])
    return _plans_of(by_cli)


def test_offline_the_cli_and_the_worker_propose_the_same_plans(tmp_path):
    words = [str(PROBLEM), "--iterations", "1", "--beam", "1", "--plans", "3", "--max-evals", "4"]
    words += FAST
    plans = _same_search(words, tmp_path, {})
    assert len(plans) >= 2  # offline: several passes in the one iteration


class Script:
    """A deterministic model: the planner's n-th call gets the n-th plan (the last repeats);
    every rewrite is the planted kernel."""

    def __init__(self) -> None:
        self.plans_given = 0
        self.lock = threading.Lock()

    def __call__(self, request: ScriptedRequest) -> ScriptedReply:
        if "# kernel-agent role: planner" not in request.system:
            return ScriptedReply(
                f"```python\n{PLANTED}\n```\n", input_tokens=1500, output_tokens=400
            )
        with self.lock:
            plan = PLANS[min(self.plans_given, len(PLANS) - 1)]
            self.plans_given += 1
        body = json.dumps({**plan, "skill_id": None, "details": "as the title says"})
        return ScriptedReply(f"```json\n{body}\n```\n", input_tokens=900, output_tokens=80)


def test_with_a_scripted_model_the_cli_and_the_worker_propose_the_same_plans(tmp_path):
    script = Script()
    with ScriptedLLMServer(script) as server:
        words = [
            str(PROBLEM),
            "--backend", "anthropic", "--base-url", server.anthropic_url,
            "--iterations", "2", "--patience", "2", "--beam", "1", "--plans", "1",
            "--samples", "1", "--max-evals", "6", *FAST,
        ]  # fmt: skip
        script.plans_given = 0
        plans = _same_search(words, tmp_path, {"ANTHROPIC_API_KEY": KEY}, before_worker=script)
    assert [title for _, title, _ in plans] == [p["title"] for p in PLANS]
