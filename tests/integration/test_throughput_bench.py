"""bench/throughput.py: its interval arithmetic, and its JSON on a tiny CPU run (no timing
asserts: only what must hold whatever the machine)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from agents.evalpool import EvalEvent
from agents.verify.verdict import Verdict
from tests.conftest import ROOT

SCRIPT = ROOT / "bench" / "throughput.py"
VERDICTS = {v.value for v in Verdict}


def _module():
    spec = importlib.util.spec_from_file_location("bench_throughput", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_max_overlap_counts_touching_intervals_as_apart():
    throughput = _module()
    assert throughput.max_overlap([]) == 0
    assert throughput.max_overlap([(0, 1), (1, 2), (2, 3)]) == 1
    assert throughput.max_overlap([(0, 2), (1, 3), (1.5, 1.7)]) == 3


def test_lane_times_and_building_share():
    throughput = _module()
    events = [
        EvalEvent("queued", 1, "build", 0.0),
        EvalEvent("building", 1, "build", 0.0),
        EvalEvent("measuring", 1, "cpu", 2.0),
        EvalEvent("queued", 2, "build", 0.0),
        EvalEvent("building", 2, "build", 2.0),
        EvalEvent("measured", 1, "cpu", 4.0),
        EvalEvent("done", 1, "cpu", 4.0, verdict="correct"),
        EvalEvent("done", 2, "build", 3.0, verdict="incorrect"),  # never timed
    ]
    lanes = throughput.lane_times(events)
    assert lanes["build_lane_s"] == 3.0  # job 1: 0..2, job 2: 2..3
    assert lanes["measure_lane_s"] == 2.0
    assert lanes["max_overlapping_timings"] == 1
    assert throughput.building_share(events, 1) == pytest.approx(0.5)  # job 2 built 2..3


def _run(tmp_path, *extra: str) -> dict:
    out = tmp_path / "throughput.json"
    command = [
        sys.executable,
        str(SCRIPT),
        "--problems",
        "2",
        "--timing-budget",
        "0.2",
        "--rounds",
        "1",
        "--no-warmup",
        "--markdown",
        "--out",
        str(out),
        *extra,
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| backend | device | workers |" in done.stdout
    return json.loads(out.read_text())


def _check_runs(report: dict, backend: str, workers: list[int]) -> None:
    batch = report["batch"]
    size = batch["candidates"]
    assert size == len(batch["items"]) >= 2 * 2  # a reference and at least one pass each
    assert [i["kind"] for i in batch["items"]].count("reference") == 2
    assert {"date", "machine", "command", "torch", "cores"} <= set(report)
    assert [(r["backend"], r["workers"]) for r in report["throughput"]] == [
        (backend, w) for w in workers
    ]
    assert len(report["runs"]) == len(workers)
    for run in report["runs"]:
        assert run["candidates"] == size
        assert run["verdicts_given"] == size == sum(run["verdicts"].values())
        assert len(run["results"]) == size
        assert {r["verdict"] for r in run["results"]} <= VERDICTS  # no pool error
        assert run["unclosed_timings"] == 0
        timed = sum(run["measure_intervals"].values())
        assert timed >= run["verdicts"].get("correct", 0) > 0
        assert run["max_overlapping_timings"] == 1
        assert run["wall_s"] > 0 and run["candidates_per_min"] > 0


@pytest.mark.slow
@pytest.mark.long
def test_local_backend_json(tmp_path):
    report = _run(
        tmp_path,
        "--backends",
        "local",
        "--workers",
        "1,2",
        "--isolation-rounds",
        "1",
        "--isolation-kernels",
        "1",
    )
    _check_runs(report, "local", [1, 2])
    assert report["ray_imported"] is False  # the device machine has no Ray
    iso = report["isolation"]
    assert iso["backend"] == "local" and iso["rounds"] == 1 and iso["workers"] >= 1
    (kernel,) = iso["kernels"]
    assert kernel["kernel"] == "reference"
    assert len(kernel["alone_samples_ms"]) == len(kernel["busy_samples_ms"]) == 1
    assert kernel["ratio"] == pytest.approx(kernel["busy_ms"] / kernel["alone_ms"], rel=1e-3)


@pytest.mark.slow
@pytest.mark.long
def test_ray_backend_json(tmp_path):
    pytest.importorskip("ray")
    report = _run(tmp_path, "--backends", "ray", "--workers", "1", "--no-isolation")
    _check_runs(report, "ray", [1])
    assert report["isolation"] is None


def test_skipped_passes_are_recorded_and_never_run():
    """`--skip-passes` (for the GPU run, where max-autotune compiles take minutes) leaves a
    pass out of the batch and says so in the JSON."""
    import asyncio

    from agents.evaluate import EvalOptions

    throughput = _module()
    paths = throughput.discover(throughput.PROBLEMS)[:1]
    from agents.offline.registry import PASSES

    skip = frozenset(PASSES)
    args = throughput.parse(["--skip-passes", ",".join(sorted(skip))])
    assert set(args.skip_passes) == skip
    items, passes = asyncio.run(throughput.build_batch(paths, EvalOptions(device="cpu"), skip))
    assert [i.kind for i in items] == ["reference"]
    assert passes and all(p["note"] == "skipped (--skip-passes)" for p in passes)
    assert all(not p["emitted"] for p in passes)


def test_an_unknown_skipped_pass_is_one_line():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--skip-passes", "torch-compiel"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "--skip-passes: unknown pass torch-compiel" in done.stderr


def test_a_refused_candidate_keeps_its_reason():
    """A benchmark row that says "incorrect" says why, so a refusal on a lent GPU can be read
    after the machine is gone."""
    import asyncio
    from dataclasses import replace

    from agents.bench.suite import baseline_candidate
    from agents.task import SourceFile
    from tests.conftest import ADVERSARIAL, FAST, TESTS

    throughput = _module()
    reference = SourceFile.from_path(TESTS / "problems" / "two_outputs.py")
    options = replace(FAST, jail=False)
    batch = [
        throughput.Item(
            "two_outputs",
            "reference",
            reference,
            baseline_candidate(reference, "eager"),
            replace(options, static_check=False),  # trusted, as the benchmark's batch marks it
        ),
        throughput.Item(
            "two_outputs",
            "wrong",
            reference,
            SourceFile.from_path(ADVERSARIAL / "second_output_wrong.py"),
            options,
        ),
    ]
    run = asyncio.run(throughput.run_config("local", 1, batch, None))
    right, wrong = run["results"]
    assert right["verdict"] == "correct" and "reason" not in right, right
    assert wrong["verdict"] == "incorrect" and "output 1" in wrong["reason"]
