"""`kernel-agent optimize` end to end on a GEMM whose output is provably zero: the e-graph's
collapse is offered even where the profile says the GEMM runs at 100% of its peak (a ceiling
measured under load, planted in the ceilings cache the profiler reads), and a second run with
the same memory hands the first run's verified rewrite back, re-verified, instead of hiding
it as "already tried"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.profile.ceilings import CACHE_VERSION, cache_path
from agents.profile.report import Ceilings
from tests.conftest import ROOT
from tests.integration.test_search import optimize

PROBLEM = ROOT / "tests" / "algebra_problems" / "4_Gemm_RowMax_Centre_GELU.py"
pytestmark = pytest.mark.slow  # two optimize runs end to end, about 45 s together
RECALLED = "Recalled from memory: "


def plant_loaded_ceilings(cache_home: Path) -> None:
    """Ceilings as a heavily loaded machine measures them (a thousandth of a quiet one's), in
    the cache file the profiler reads: the GEMM then runs at 100% of this 'peak'."""
    ceilings = Ceilings("cpu", "loaded", 1, 0.01, 0.05, None, "2026-01-01T00:00:00+00:00")
    path = cache_path("cpu", 1, cache_home / "kernel-agent")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"cache_version": CACHE_VERSION, "ceilings": ceilings.to_json()}))


def run(tmp: Path, name: str) -> tuple[dict, dict, str]:
    """One offline optimize: its JSON report, its trajectory and its progress text."""
    trajectory = tmp / f"{name}.json"
    done = optimize(
        str(PROBLEM),
        "--json",
        "--threads", "1",
        "--timing-budget", "1.0",
        "--max-evals", "1",
        "--iters", "1",
        "--memory", str(tmp / "memory.sqlite3"),
        "--trajectory", str(trajectory),
        "--output", str(tmp / f"{name}.py"),
        env={"XDG_CACHE_HOME": str(tmp / "cache")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), json.loads(trajectory.read_text()), done.stderr


def code_of(path: Path) -> list[str]:
    """A written rewrite without its header comments (which carry the run's speedup)."""
    return [line for line in path.read_text().splitlines() if not line.startswith("#")]


@pytest.fixture(scope="module")
def first(tmp_path_factory) -> tuple[Path, dict, dict, str]:
    tmp = tmp_path_factory.mktemp("proof")
    plant_loaded_ceilings(tmp / "cache")
    return (tmp, *run(tmp, "first"))


def test_the_collapse_is_offered_with_the_gemm_at_its_peak(first):
    tmp, report, trajectory, progress = first
    assert "at 100% of the roofline peak" in progress  # the gate saw the GEMM at its peak
    assert report["improved"] is True and report["verdict"] == "correct", report
    assert report["methods"] == ["equality-saturation"]
    points = trajectory["trajectory"]
    assert points[0]["method"] == "equality-saturation" and points[0]["verdict"] == "correct"
    source = (tmp / "first.py").read_text()
    # The zeros are shaped on the meta device: the GEMM no longer runs for real.
    assert "full_like" in source and "'meta'" in source


def test_a_second_run_hands_back_the_verified_rewrite_re_verified(first):
    tmp, report, _, _ = first
    again, trajectory, progress = run(tmp, "second")
    assert again["improved"] is True and again["verdict"] == "correct", again
    assert again["methods"] == report["methods"] == ["equality-saturation"]
    assert "failed re-verification" not in " ".join(again["notes"])
    recalled = trajectory["trajectory"][0]
    assert recalled["plan"].startswith(RECALLED), trajectory["trajectory"]
    assert recalled["verdict"] == "correct" and recalled["method"] == "equality-saturation"
    assert recalled["evaluation"] == 1  # judged by evaluate, like any candidate
    assert any(c["plan"].startswith(RECALLED) for c in again["candidates"])
    assert code_of(tmp / "second.py") == code_of(tmp / "first.py")  # the same rewrite
    assert RECALLED in progress
