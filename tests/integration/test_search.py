"""The agent loop end to end: the real CLI (a subprocess) and the real SDK clients, talking to a
scripted model server on loopback. The candidates are real kernels, judged by the sandbox."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agents.evaluate import EvalOptions
from agents.llm.accounting import CostMeter
from agents.llm.config import LLMConfig
from agents.llm.factory import make_chat_model
from agents.roles.llm_roles import LLMExecutor, LLMPlanner, LLMRepairer, LLMSummarizer
from agents.search import events as ev
from agents.search.beam import Roles, Search, SearchConfig, SearchMemory, run_search
from agents.search.budget import Budget, CancelToken
from agents.task import SourceFile
from memory.experiences import ExperienceStore
from memory.logbook import Logbook
from memory.store import MemoryStore
from tests.conftest import CANDIDATES, ROOT
from tests.llm_server import ScriptedLLMServer, ScriptedReply, ScriptedRequest

PROBLEM = ROOT / "bench" / "problems" / "13_gemm_divide_sum_scaling.py"
PLANTED = (ROOT / "examples" / "gemm_divide_sum_scale_new.py").read_text()
# Two wrong rewrites: the sum over the wrong dimension, and the wrong scale.
BROKEN = PLANTED.replace("self.weight.sum(dim=0)", "self.weight.sum(dim=1)")
BROKEN_SCALE = PLANTED.replace("(self.scaling_factor / 2)", "(self.scaling_factor / 3)")
# A correct rewrite that is no faster: the same ops, under another name.
SAME = (CANDIDATES / "gemm_sum_same.py").read_text()
# A correct rewrite that is clearly slower (the GEMM three times), so that no timing noise on a
# loaded machine can make it look faster.
SLOWER = SAME.replace(
    "        x = torch.matmul(x, self.weight.T)\n",
    "        x = sum(torch.matmul(x, self.weight.T) for _ in range(3)) / 3\n",
)
CANARY = "sk-ant-api03-CANARY-7f3c9a1e5b2d4c6e8a0b1c2d3e4f5a6b7c8d9e0f1a2b"
PLAN_SUM = {
    "title": "Sum the weight rows before the GEMM",
    "method": "reduce-before-gemm",
    "skill_id": None,
    "details": "sum(x @ W.T, dim=1) equals x @ W.sum(0): do a matrix-vector product.",
}
PLAN_SAME = {
    "title": "Rename the intermediate tensors",
    "method": "cleanup",
    "skill_id": None,
    "details": "Keep the ops; only restructure the code.",
}
FAST = ("--no-profile", "--threads", "1", "--timing-budget", "1.0", "--no-jail")


def role_of(request: ScriptedRequest) -> str:
    match = re.search(r"# kernel-agent role: (\w+)", request.system)
    assert match, "every role's system prompt starts with its marker"
    return match.group(1)


def fenced(kind: str, body: str) -> str:
    return f"Here it is.\n\n```{kind}\n{body}\n```\n"


class Script:
    """A deterministic model: each role's replies come from its own queue (the last repeats)."""

    def __init__(self, **queues: list[ScriptedReply]) -> None:
        self.queues = {role: list(replies) for role, replies in queues.items()}
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, request: ScriptedRequest) -> ScriptedReply:
        role = role_of(request)
        with self.lock:
            n = self.calls.get(role, 0)
            self.calls[role] = n + 1
            queue = self.queues[role]
            return queue[min(n, len(queue) - 1)]


def plan_reply(plan: dict) -> ScriptedReply:
    return ScriptedReply(fenced("json", json.dumps(plan)), input_tokens=900, output_tokens=80)


def code_reply(code: str) -> ScriptedReply:
    return ScriptedReply(fenced("python", code), input_tokens=1500, output_tokens=400)


SUMMARY = ScriptedReply(
    fenced(
        "json",
        json.dumps(
            {
                "title": "Reduce the weight before the GEMM",
                "lesson": "When a sum over the GEMM's output dimension follows it, sum the "
                "weight first and do a matrix-vector product.",
            }
        ),
    ),
    input_tokens=700,
    output_tokens=60,
    cache_read_tokens=300,
)


def optimize(*args: str, env: dict | None = None, timeout: float = 300):
    return subprocess.run(
        [sys.executable, "-m", "agents", "optimize", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def test_scripted_search_returns_the_planted_kernel_and_remembers_it(tmp_path):
    script = Script(
        planner=[plan_reply(PLAN_SUM)],
        executor=[code_reply(PLANTED)],
        summarizer=[SUMMARY],
        repairer=[code_reply(PLANTED)],
    )
    memory = tmp_path / "memory.sqlite3"
    output = tmp_path / "fast.py"
    trajectory = tmp_path / "trajectory.json"
    plot = tmp_path / "trajectory.png"
    with ScriptedLLMServer(script) as server:
        done = optimize(
            str(PROBLEM),
            "--llm", "anthropic", "--base-url", server.anthropic_url,
            "--beam", "1", "--plans", "2", "--samples", "1", "--iters", "2", "--patience", "1",
            "--memory", str(memory), "--output", str(output),
            "--trajectory", str(trajectory), "--plot", str(plot), "--json", *FAST,
            env={"ANTHROPIC_API_KEY": CANARY},
        )  # fmt: skip
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "correct" and report["speedup"] > 1.0
    assert report["confirmed"] is True
    assert report["methods"] == ["reduce-before-gemm"]
    assert "self.weight.sum(dim=0)" in output.read_text()
    assert report["output"] == str(output)
    assert report["evaluations"] >= 2  # the candidate, then its confirmation
    assert report["tokens"] > 0 and report["cost_usd"] > 0
    assert set(report["cost"]["roles"]) >= {"planner", "executor", "summarizer"}
    assert report["cost"]["cache_read_tokens"] >= 300
    assert plot.stat().st_size > 0
    assert json.loads(trajectory.read_text())["trajectory"][0]["verdict"] == "correct"
    # Every role's static system part was marked for prompt caching.
    assert all(r.system_blocks[0].get("cache_control") == {"type": "ephemeral"} for r in requests)
    # Memory: the lesson, and the logbook's attempts with the plan.
    with MemoryStore(memory) as store:
        experiences = ExperienceStore(store).list()
        assert [e.kind for e in experiences] == ["positive"]
        assert "sum the weight first" in experiences[0].lesson
        assert experiences[0].slow_source == PROBLEM.read_text()
        book = Logbook(store)
        (task,) = book.tasks()
        attempts = book.attempts(task)
        assert [a.verdict for a in attempts] == ["correct", "correct"]  # reference, then ours
        assert attempts[1].plan.startswith(PLAN_SUM["title"])
        assert attempts[1].parent_id == attempts[0].id
    # The key reached the server (in a header) and nowhere else.
    assert any(CANARY in " ".join(r.headers.values()) for r in requests)
    for text in (done.stdout, done.stderr, trajectory.read_text()):
        assert CANARY not in text
    assert CANARY.encode() not in memory.read_bytes()
    for side in memory.parent.glob("memory.sqlite3*"):
        assert CANARY.encode() not in side.read_bytes()
    with sqlite3.connect(memory) as conn:
        dump = "\n".join(conn.iterdump())
    assert CANARY not in dump


def test_openai_backend_repairs_until_a_fix_passes_and_fixes_the_class_name(tmp_path):
    renamed_broken = BROKEN.replace("class ModelNew", "class FastModel")
    script = Script(
        planner=[plan_reply(PLAN_SUM)],
        # prose only (no code): the executor asks again, and gets a renamed, broken class
        executor=[ScriptedReply("I would sum the weight first."), code_reply(renamed_broken)],
        # the first fix repeats the failed code (not judged twice), the next is wrong again
        repairer=[code_reply(BROKEN), code_reply(BROKEN_SCALE), code_reply(PLANTED)],
        summarizer=[SUMMARY],
    )
    trajectory = tmp_path / "t.json"
    with ScriptedLLMServer(script) as server:
        done = optimize(
            str(PROBLEM),
            "--llm", "openai", "--model", "gpt-oss-120b", "--base-url", server.openai_url,
            "--beam", "1", "--plans", "1", "--samples", "1", "--iters", "1",
            "--repairs", "3", "--no-memory", "--output", str(tmp_path / "out.py"),
            "--trajectory", str(trajectory), "--json", *FAST,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    steps = [(p["repair"], p["verdict"]) for p in report["trajectory"]]
    assert steps == [(0, "incorrect"), (2, "incorrect"), (3, "correct")]
    assert report["verdict"] == "correct"
    # every attempt's fate, the repeated fix included; the last fix is the one offered
    fates = [(c["repair"], c["fate"]) for c in report["candidates"]]
    assert [repair for repair, _ in fates] == [0, 1, 2, 3]
    assert fates[1][1] == "duplicate" and fates[3][1] == "chosen"
    assert {fates[0][1], fates[2][1]} <= {"incorrect", "out_of_band"}
    assert script.calls == {"planner": 1, "executor": 2, "repairer": 3}  # no memory: no summary
    assert report["cost"]["roles"]["repairer"]["calls"] == 3


def test_rate_limits_overload_and_timeouts_are_retried(tmp_path):
    config = tmp_path / "llm.toml"
    config.write_text("[llm]\ntimeout_s = 1.5\nmax_attempts = 4\n")
    script = Script(
        planner=[ScriptedReply(status=429, retry_after=0.1), plan_reply(PLAN_SUM)],
        executor=[ScriptedReply(status=529), code_reply(PLANTED)],
        summarizer=[ScriptedReply(delay_s=3.0), SUMMARY],
        repairer=[code_reply(PLANTED)],
    )
    with ScriptedLLMServer(script) as server:
        done = optimize(
            str(PROBLEM),
            "--llm", "anthropic", "--base-url", server.anthropic_url, "--config", str(config),
            "--beam", "1", "--plans", "1", "--samples", "1", "--iters", "1",
            "--memory", str(tmp_path / "m.sqlite3"), "--output", str(tmp_path / "o.py"),
            "--json", *FAST,
            env={"ANTHROPIC_API_KEY": "sk-ant-test"},
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "correct"
    roles = report["cost"]["roles"]
    assert roles["planner"]["retries"] == 1
    assert roles["executor"]["retries"] == 1
    assert roles["summarizer"]["retries"] == 1  # the first reply came after the timeout


def test_the_evaluation_budget_stops_the_search(tmp_path):
    script = Script(
        planner=[plan_reply(PLAN_SAME)],
        executor=[code_reply(SLOWER)],
        summarizer=[SUMMARY],
        repairer=[code_reply(SLOWER)],
    )
    with ScriptedLLMServer(script) as server:
        done = optimize(
            str(PROBLEM),
            "--llm", "openai", "--base-url", server.openai_url,
            "--beam", "2", "--plans", "2", "--samples", "2", "--iters", "5",
            "--max-evals", "1", "--no-memory", "--output", str(tmp_path / "o.py"), "--json",
            *FAST,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "evaluation budget spent" in report["stopped_because"]
    # The only candidate is correct but slower: an honest "no improvement".
    [only] = report["trajectory"]
    assert only["verdict"] == "correct" and only["speedup"] < 1.0
    assert report["verdict"] == "no_improvement" and report["output"] is None
    assert report["speedup"] == 1.0
    assert not (tmp_path / "o.py").exists()
    # its fate says so; any sample the budget left unjudged says that
    (judged,) = [c for c in report["candidates"] if c["evaluation"] is not None]
    assert judged["fate"] == "slower" and judged["vs_reference"] == only["speedup"]
    assert judged["reason"].startswith("no faster than the reference")
    for other in report["candidates"]:
        assert other is judged or (
            other["fate"] == "cut_by_budget" and "evaluation budget" in other["reason"]
        )


def test_the_cost_budget_stops_the_search(tmp_path):
    script = Script(planner=[plan_reply(PLAN_SUM)], executor=[code_reply(PLANTED)])
    with ScriptedLLMServer(script) as server:
        done = optimize(
            str(PROBLEM),
            "--llm", "anthropic", "--base-url", server.anthropic_url,
            "--beam", "1", "--plans", "3", "--samples", "1", "--iters", "3",
            "--max-cost", "0.000001", "--no-memory", "--json", *FAST,
            env={"ANTHROPIC_API_KEY": "sk-ant-test"},
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "cost budget spent" in report["stopped_because"]
    assert report["evaluations"] == 0


def test_a_missing_key_is_one_sentence_that_says_how_to_set_it():
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "agents", "optimize", str(PROBLEM), "--llm", "anthropic"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "ANTHROPIC_API_KEY" in done.stderr and "--llm offline" in done.stderr


def scripted_roles(server):
    """The four LLM roles on one anthropic client that talks to the scripted `server`:
    (roles, meter, model); the caller closes the model."""
    meter = CostMeter()
    config = LLMConfig(backend="anthropic", base_url=server.anthropic_url, api_key="sk-x")
    model = make_chat_model(config)
    roles = Roles(
        LLMPlanner(model, meter),
        LLMExecutor(model, meter),
        LLMRepairer(model, meter),
        LLMSummarizer(model, meter),
    )
    return roles, meter, model


def _in_process_search(server, tmp_path, cancel=None, on_event=None, seed=0, evals=20):
    async def go():
        roles, meter, model = scripted_roles(server)
        store = MemoryStore(tmp_path / f"m{seed}-{time.monotonic_ns()}.sqlite3")
        search = Search(
            SourceFile(PROBLEM.read_text(), str(PROBLEM)),
            roles,
            meter,
            options=EvalOptions(threads=1, timing_budget_s=0.3, jail=False),
            config=SearchConfig(
                beam=2, plans=2, samples=2, iterations=2, patience=2, profile=False, seed=seed
            ),
            budget=Budget(max_evals=evals),
            memory=SearchMemory(ExperienceStore(store), Logbook(store)),
            on_event=on_event,
            cancel=cancel,
        )
        try:
            return await run_search(search)
        finally:
            await model.aclose()
            store.close()

    return asyncio.run(go())


SLOW = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        for _ in range(2_000_000):  # seconds per call on any machine: a cancel lands mid-run
            y = torch.matmul(x, self.weight.T)
        y = y / 2
        return torch.sum(y, dim=1, keepdim=True) * self.scaling_factor
"""


def _children() -> set[int]:
    me = os.getpid()
    found = set()
    for task in Path(f"/proc/{me}/task").iterdir():
        try:
            text = (task / "children").read_text().split()
        except OSError:  # the thread ended while we looked
            continue
        found.update(int(pid) for pid in text)
    return found


def test_cancel_in_mid_iteration_stops_within_seconds_and_kills_the_sandbox(tmp_path):
    script = Script(
        planner=[plan_reply(PLAN_SUM), plan_reply(PLAN_SAME)],
        executor=[code_reply(PLANTED), code_reply(SLOW)],
        summarizer=[SUMMARY],
        repairer=[code_reply(SLOW)],
    )
    cancel = CancelToken()
    seen: list[ev.SearchEvent] = []
    timing: dict[str, float] = {}

    def watch():
        """Cancel once a sandbox has been running for 2 s: mid-evaluation, whichever of the
        two candidates the search judges first and however fast this machine is."""
        first_seen: dict[int, float] = {}
        while not cancel.cancelled:
            now = time.monotonic()
            for pid in _children():
                first_seen.setdefault(pid, now)
                if now - first_seen[pid] >= 2.0:
                    timing["cancel_at"] = now
                    cancel.cancel()
                    return
            time.sleep(0.05)

    on_event = seen.append
    threading.Thread(target=watch, daemon=True).start()
    with ScriptedLLMServer(script) as server:
        result = _in_process_search(server, tmp_path, cancel=cancel, on_event=on_event)
    stopped = time.monotonic()
    assert result.stopped_because == "cancelled"
    assert stopped - timing["cancel_at"] < 8.0
    assert not _children(), "no sandbox may outlive a cancelled search"
    finished = [e for e in seen if isinstance(e, ev.Finished)]
    assert len(finished) == 1
    # The best verified kernel so far is kept (if the planted one was judged before the cancel).
    if result.improved:
        assert "self.weight.sum(dim=0)" in (result.source or "")


def by_content(request: ScriptedRequest) -> ScriptedReply:
    """Replies that are a function of the request alone, as a model at temperature 0."""
    role = role_of(request)
    user = request.messages[0][1]
    if role == "planner":
        return plan_reply(PLAN_SUM if "Plan slot 1." in user else PLAN_SAME)
    if role == "executor":
        if PLAN_SUM["title"] not in user:
            return code_reply(SAME)
        if "independent sample 2" in user:  # the same method, written another way
            return code_reply(PLANTED.replace("self.weight.sum(dim=0)", "self.weight.sum(0)"))
        return code_reply(PLANTED)
    if role == "repairer":
        return code_reply(PLANTED)
    return SUMMARY


def test_a_run_is_deterministic_for_a_seed(tmp_path):
    """The same candidates, verdicts and answer; only the order in which concurrent samples
    finish may differ."""
    runs = []
    for _ in range(2):
        with ScriptedLLMServer(by_content) as server:
            result = _in_process_search(server, tmp_path, seed=7, evals=6)
        points = sorted((p.plan, p.sample, p.repair, p.verdict) for p in result.trajectory)
        runs.append((points, result.verdict, result.methods))  # the faster twin is noise
    assert runs[0] == runs[1] and len(runs[0][0]) == 3  # two SAME samples are one kernel


@pytest.mark.parametrize("budget", ["0", "-1"])
def test_bad_budgets_are_usage_errors(budget):
    done = optimize(str(PROBLEM), "--max-evals", budget, "--llm", "openai", timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "max_evals must be positive" in done.stderr
