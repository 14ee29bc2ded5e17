"""`kernel-agent optimize` with the embedded offline backend, end to end as a subprocess:
no LLM, real passes, the real reviewer, a real memory file."""

from __future__ import annotations

import json
import sqlite3

import pytest
import torch

from agents.search.fates import CandidateFate, Fate
from tests.conftest import ROOT
from tests.integration.test_search import optimize

PROBLEM = ROOT / "bench" / "problems" / "13_gemm_divide_sum_scaling.py"


def assert_same_model(problem: str, rewrite: str, init: tuple) -> None:
    """Model and the rewritten ModelNew, built with `init` (not the arguments the search
    verified) and the same weights, compute the same thing."""
    spaces: list[dict] = [{}, {}]
    exec(compile(problem, "problem.py", "exec"), spaces[0])
    exec(compile(rewrite, "rewrite.py", "exec"), spaces[1])
    torch.manual_seed(1)
    model = spaces[0]["Model"](*init).double()
    new = spaces[1]["ModelNew"](*init).double()
    new.load_state_dict(model.state_dict())
    x = torch.randn(5, init[0], dtype=torch.float64)
    torch.testing.assert_close(new(x), model(x))


@pytest.mark.slow
def test_offline_optimize_returns_a_verified_faster_kernel(tmp_path):
    out = tmp_path / "optimized.py"
    memory = tmp_path / "memory.sqlite3"
    trajectory = tmp_path / "trajectory.json"
    done = optimize(
        str(PROBLEM),
        "--json",
        "--threads",
        "1",
        "--timing-budget",
        "1.0",  # long enough that a 2-wide test run's load rarely leaves it unstable twice
        "--max-evals",
        "6",
        "--iters",
        "1",
        "--no-profile",
        "--output",
        str(out),
        "--memory",
        str(memory),
        "--trajectory",
        str(trajectory),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    fates = [(c["plan"], c["fate"], c["verdict"], c["reason"]) for c in report["candidates"]]
    assert report["improved"] is True and report["verdict"] == "correct", fates
    assert report["speedup"] > 1.0
    assert report["tokens"] == 0 and report["cost_usd"] == 0
    assert report["output"] == str(out)
    source = out.read_text()
    # The sum over the GEMM's output moved ahead of it: the weight is summed, not multiplied.
    assert "class ModelNew" in source and ".sum(" in source
    # The scale stays an attribute: the rewrite serves other constructor arguments too.
    assert "self.scaling_factor" in source and "_check_specialised" not in source
    assert_same_model(PROBLEM.read_text(), source, (64, 48, -0.75))
    # The user's file is untouched, and what worked went into memory as an experience.
    assert "class Model(" in PROBLEM.read_text()
    with sqlite3.connect(memory) as db:
        assert db.execute("select count(*) from experiences").fetchone()[0] >= 1
    points = json.loads(trajectory.read_text())["trajectory"]
    assert [p["evaluation"] for p in points] == list(range(1, len(points) + 1))
    assert any(p["verdict"] == "correct" and (p["speedup"] or 0) > 1.0 for p in points)


def test_optimize_json_gives_every_candidates_fate(tmp_path):
    """`optimize --json` lists every candidate the search made: each a valid fate, every
    judged one matching its trajectory point, and the chosen one carrying the result's own
    time and speedup (its confirming run's)."""
    done = optimize(
        str(PROBLEM),
        "--json",
        "--threads",
        "1",
        "--timing-budget",
        "0.2",
        "--max-evals",
        "2",
        "--iters",
        "1",
        "--no-profile",
        "--no-memory",
        "--quiet",
        "--output",
        str(tmp_path / "optimized.py"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    fates = [CandidateFate.from_json(entry) for entry in report["candidates"]]
    assert fates and all(isinstance(f.fate, Fate) for f in fates)
    assert [f.to_json() for f in fates] == report["candidates"]  # nothing unread or lost
    judged = [f for f in fates if f.evaluation is not None]
    points = report["trajectory"]
    assert [(f.evaluation, f.verdict) for f in judged] == [
        (p["evaluation"], p["verdict"]) for p in points
    ]
    for fate in fates:
        assert fate.fate is not Fate.CHOSEN or fate.verdict == "correct"
        if fate.fate not in (Fate.CHOSEN, Fate.SLOWER):
            assert fate.reason, fate  # every candidate not offered says why
    assert report["improved"] is True, report["stopped_because"]
    (chosen,) = [f for f in fates if f.fate is Fate.CHOSEN]
    assert chosen.time_ms == report["eval_report"]["candidate_ms"]
    assert chosen.vs_reference == report["speedup"] and chosen.method == report["methods"][-1]


def test_offline_optimize_refuses_a_file_without_model(tmp_path):
    bad = tmp_path / "not_a_problem.py"
    bad.write_text("x = 1\n")
    done = optimize(str(bad), "--json", "--no-profile", timeout=120)
    assert done.returncode in (1, 2)
    message = done.stderr.strip().splitlines()[-1]
    assert "Model" in message and "Traceback" not in done.stderr


@pytest.mark.long  # the Ray backend end to end: test-all
@pytest.mark.slow
def test_offline_optimize_runs_unchanged_on_the_ray_backend(tmp_path):
    """The same search, its candidates judged as Ray tasks on a local Ray the CLI starts."""
    pytest.importorskip("ray")
    out = tmp_path / "optimized.py"
    done = optimize(
        str(PROBLEM),
        "--json",
        "--threads",
        "1",
        "--timing-budget",
        "0.3",
        "--max-evals",
        "4",
        "--iters",
        "1",
        "--no-profile",
        "--no-memory",
        "--eval-backend",
        "ray",
        "--output",
        str(out),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    fates = [(c["plan"], c["fate"], c["verdict"], c["reason"]) for c in report["candidates"]]
    assert report["improved"] is True and report["verdict"] == "correct", fates
    assert ".sum(" in out.read_text()


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--ray-address", "127.0.0.1:6379"], "--ray-address needs --eval-backend ray"),
        (["--eval-backend", "ray", "--ray-address", "127.0.0.1:1"], "cannot reach the Ray"),
    ],
)
def test_a_bad_evaluation_backend_is_one_line(extra, expected):
    if "ray" in extra:
        pytest.importorskip("ray")
    done = optimize(str(PROBLEM), "--no-profile", "--no-memory", *extra, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr
