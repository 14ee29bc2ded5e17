"""Memory pays for tuning (issue 21 item 5): the triton-gemm pass's winning tiles are kept per
(pass, op signature, shape class, device) in memory/tuning.py, only once the verifier judged
the candidate correct, and a later run's pass compiles that one config instead of the table.

On the CPU: the table (round trip, bucketing, migration, malformed rows), the pass's use of a
remembered config, the executor's verified-only recording (the child faked), the search's
`verified` call (real sandboxed evaluations), and reading `best_config` after a first call in
Triton's CPU interpreter. The `cuda` tests run the child's probe and the executor on a GPU.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import agents.offline.roles as offline_roles
from agents.evaluate import EvalOptions
from agents.llm.accounting import CostMeter
from agents.offline.fx.tracing import apply_general_first
from agents.offline.passes.triton_gemm import TritonGemm
from agents.offline.passes.triton_gemm_kernel import TILES, tile_config
from agents.offline.roles import OfflineExecutor, OfflineSummarizer
from agents.roles.base import Candidate, Plan, PlanningContext
from agents.search.beam import Roles, Search, SearchConfig, SearchMemory, run_search
from agents.search.budget import Budget
from agents.task import SourceFile
from agents.verify.static_check import check_candidate
from memory.experiences import ExperienceStore
from memory.logbook import Logbook
from memory.store import MIGRATIONS, SCHEMA_VERSION, MemoryStore
from memory.tuning import (
    TuningKey,
    TuningMemory,
    bucket,
    check_config,
    for_device,
    observation_from,
    shape_class,
    site_key,
)
from tests.conftest import ROOT
from tests.integration.test_triton_gemm import linear_problem, program

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
RELU = linear_problem("torch.relu(y)")  # M 37, K 70, N 45: shape class M64xN64xK128
SIGNATURE, SHAPE = "linear+add+relu:float32", "M64xN64xK128"
CONFIG = {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4}
CONFIG = {**CONFIG, "num_stages": 5}  # TILES[-1]: one of the table's own


def observed(config=CONFIG, device="NVIDIA H200", from_memory=False, **extra) -> dict:
    return {
        "op_signature": SIGNATURE,
        "shape_class": SHAPE,
        "device_name": device,
        "config": config,
        "time_ms": 0.0125,
        "tuning_s": 21.5,
        "from_memory": from_memory,
        **extra,
    }


# -- the table --------------------------------------------------------------------------------


@given(st.integers(min_value=1, max_value=1 << 20))
def test_a_bucket_is_the_next_power_of_two(size):
    b = bucket(size)
    assert b & (b - 1) == 0 and size <= b < 2 * size


@given(st.integers(min_value=5, max_value=1 << 16))
def test_similar_shapes_share_a_class_and_a_doubling_leaves_it(size):
    lo = bucket(size) // 2 + 1  # the smallest size in size's bucket
    assert shape_class(lo, size, 8) == shape_class(bucket(size), size, 8)
    assert shape_class(size, size, size) != shape_class(2 * bucket(size), size, size)


def test_bucket_edges():
    assert [bucket(n) for n in (0, 1, 2, 3, 4, 5, 1000, 1024, 1025)] == [
        *(1, 1, 2, 4, 4, 8),
        *(1024, 1024, 2048),
    ]
    assert shape_class(37, 45, 70) == SHAPE


def test_a_verified_choice_round_trips_and_counts_its_reuses(tmp_path):
    with MemoryStore(tmp_path / "m.sqlite3") as store:
        memory = TuningMemory(store)
        memory.record(observation_from("triton-gemm", observed()))
        key = TuningKey("triton-gemm", SIGNATURE, SHAPE, "NVIDIA H200")
        record = memory.get(key)
        assert record is not None
        assert (record.config, record.time_ms, record.tuning_s, record.hits) == (
            CONFIG,
            0.0125,
            21.5,
            0,
        )
        memory.record(observation_from("triton-gemm", observed(from_memory=True, tuning_s=0)))
        memory.record(observation_from("triton-gemm", observed(from_memory=True, tuning_s=0)))
        again = memory.get(key)
        assert again is not None and again.hits == 2 and again.tuning_s == 21.5  # kept
        other = {**CONFIG, "BLOCK_M": 64}
        memory.record(observation_from("triton-gemm", observed(other, tuning_s=18.0)))
        replaced = memory.get(key)
        assert replaced is not None and (replaced.config, replaced.hits) == (other, 0)
        assert memory.recall("triton-gemm", "NVIDIA A100") == []
        assert memory.recall("other-pass") == []
        assert [r.as_request() for r in memory.recall("triton-gemm")] == [
            {
                "op_signature": SIGNATURE,
                "shape_class": SHAPE,
                "device_name": "NVIDIA H200",
                "config": other,
            }
        ]


def test_a_version_2_database_gains_the_table_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    for step in MIGRATIONS[:2]:
        step(conn)
    conn.execute(
        "INSERT INTO attempts (task_id, verdict, created_at, source_hash, plan_key, skills, "
        "plan, error_digest) VALUES ('t', 'correct', 1.0, 'h', 'k', '', 'p', '')"
    )
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    with MemoryStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 3
        assert store.query("SELECT task_id FROM attempts")[0][0] == "t"
        TuningMemory(store).record(observation_from("triton-gemm", observed()))
        assert len(TuningMemory(store).recall("triton-gemm")) == 1


def test_a_malformed_row_is_skipped_with_a_message_naming_it(tmp_path, caplog):
    with MemoryStore(tmp_path / "m.sqlite3") as store:
        memory = TuningMemory(store)
        memory.record(observation_from("triton-gemm", observed()))
        bad = {"not json": "{", "bad value": json.dumps({**CONFIG, "BLOCK_M": "64"})}
        for signature, config in bad.items():
            store.write(
                lambda tx, s=signature, c=config: tx.execute(
                    "INSERT INTO tuning (pass_name, op_signature, shape_class, device_name, "
                    "config, tuning_s, hits, created_at, updated_at) "
                    "VALUES ('triton-gemm', ?, 'M1xN1xK1', 'cpu', ?, 1.0, 9, 0, 0)",
                    (s, c),
                )
            )
        with caplog.at_level(logging.WARNING, logger="kernel_agent.memory"):
            records = memory.recall("triton-gemm")
    assert [r.key.op_signature for r in records] == [SIGNATURE]
    messages = [r.getMessage() for r in caplog.records]
    assert any("skipped tuning row" in m and "not json" in m and "JSON" in m for m in messages)
    assert any("bad value" in m and "BLOCK_M" in m for m in messages)


@pytest.mark.parametrize(
    "config",
    [
        {},
        {**CONFIG, "BLOCK_M": True},
        {**CONFIG, "BLOCK_M": 4096},
        {**CONFIG, "evil": 1},
        {k: v for k, v in CONFIG.items() if k != "num_warps"},
        "BLOCK_M=32",
    ],
)
def test_a_config_is_only_known_keys_with_small_integers(config):
    with pytest.raises(ValueError):
        check_config(config)


def test_a_request_keeps_this_devices_entries_and_drops_malformed_ones(caplog):
    entries = [
        {**observed(device="NVIDIA H200"), "config": {**CONFIG, "BLOCK_M": 128}},
        observed(device="NVIDIA A100"),
        {"op_signature": "x"},
        observed(device="NVIDIA H200", config={"BLOCK_M": "1"}),
    ]
    with caplog.at_level(logging.WARNING, logger="kernel_agent.memory"):
        chosen = for_device(entries, "NVIDIA H200")
    assert chosen == {site_key(SIGNATURE, SHAPE): {**CONFIG, "BLOCK_M": 128}}
    assert len(caplog.records) == 2
    assert for_device("garbage", "cpu") == {}


# -- the pass ---------------------------------------------------------------------------------


def remembering(config: dict | None, text: str = RELU):
    prog = program(text)
    if config is not None:
        prog.tuning = {site_key(SIGNATURE, SHAPE): config}
    return apply_general_first(TritonGemm(), prog)


def test_a_remembered_site_gets_exactly_that_config_and_says_so():
    cold, warm = remembering(None), remembering(CONFIG)
    assert cold.source is not None and warm.source is not None
    assert [(s.op_signature, s.shape_class, s.from_memory) for s in cold.tuning_sites] == [
        (SIGNATURE, SHAPE, False)
    ]
    assert warm.tuning_sites[0].from_memory
    assert "configs=_TGEMM_TILES" in cold.source and "tile from memory" not in cold.summary
    assert "configs=_TGEMM_TILES" not in warm.source
    one = (
        'configs=[triton.Config({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, '
        "num_warps=4, num_stages=5)]"
    )
    assert one in warm.source
    assert f"tile from memory ({SIGNATURE} {SHAPE}: 32x64x32, 4 warps, 5 stages)" in warm.summary
    assert remembering(CONFIG).source == warm.source  # deterministic
    assert check_candidate(warm.source) == []  # what the verifier checks before running it


def test_a_config_for_another_shape_class_or_the_wrong_table_is_not_used():
    other = apply_general_first(TritonGemm(), program(linear_problem("torch.relu(y)", m=200)))
    assert other.tuning_sites[0].shape_class == "M256xN64xK128"
    prog = program(linear_problem("torch.relu(y)", m=200))
    prog.tuning = {site_key(SIGNATURE, SHAPE): CONFIG}
    assert "tile from memory" not in (apply_general_first(TritonGemm(), prog).source or "")
    row = {k: v for k, v in CONFIG.items() if k != "BLOCK_N"}  # a row tile's config
    assert not remembering(row).tuning_sites[0].from_memory
    assert not remembering({**CONFIG, "num_warps": "4"}).tuning_sites[0].from_memory


def test_the_offline_lesson_names_the_remembered_tile():
    warm = remembering(CONFIG)
    summary = asyncio.run(
        OfflineSummarizer("cuda").summarize(RELU, warm.source or "", 2.5, "Triton GEMM", False)
    )
    assert f"tile from memory ({SIGNATURE} {SHAPE}: 32x64x32, 4 warps, 5 stages)" in (
        summary.lesson
    )
    cold = asyncio.run(
        OfflineSummarizer("cuda").summarize(
            RELU, remembering(None).source or "", 2.5, "Triton GEMM", False
        )
    )
    assert "tile from memory" not in cold.lesson


# -- the executor: remembered only once verified ------------------------------------------------


def _executor(tmp_path, replies: list[dict], requests: list[dict]):
    store = MemoryStore(tmp_path / "m.sqlite3")
    reference = SourceFile(RELU, "relu.py")
    executor = OfflineExecutor(reference, EvalOptions(device="cuda"), tuning=TuningMemory(store))

    def fake_child(request, **_):
        requests.append(request)
        return SimpleNamespace(result=replies.pop(0), stderr_tail="")

    return executor, store, fake_child


def _context() -> PlanningContext:
    return PlanningContext(RELU, RELU, 1.0, "cuda")


def test_the_executor_remembers_a_choice_only_after_verified(tmp_path, monkeypatch):
    tuning = {"first_call_s": 31.0, "observations": [observed()]}
    replies = [
        {"source": "A = 1\n", "summary": "cold", "tuning": tuning},
        {"source": "B = 2\n", "summary": "wrong one", "tuning": tuning},
    ]
    requests: list[dict] = []
    executor, store, fake = _executor(tmp_path, replies, requests)
    monkeypatch.setattr(offline_roles, "run_child", fake)
    plan = Plan("Triton GEMM", "triton-gemm")
    first = asyncio.run(executor.implement(_context(), plan, 0))
    assert "31.0 s compiling and autotuning 1 kernel(s), 0 with their tile from memory" in (
        first.notes
    )
    second = asyncio.run(executor.implement(_context(), plan, 1))
    assert second.source == "B = 2\n" and executor.tuning_s == 62.0
    memory = TuningMemory(store)
    assert memory.recall("triton-gemm") == []  # nothing is verified yet
    executor.verified("Z = 9\n")  # a source this executor did not make: nothing pending
    assert memory.recall("triton-gemm") == []
    executor.verified("A = 1\n")
    (record,) = memory.recall("triton-gemm")
    assert (record.config, record.key.device_name, record.tuning_s) == (CONFIG, "NVIDIA H200", 21.5)
    executor.verified("A = 1\n")  # judged twice: counted once
    assert memory.recall("triton-gemm")[0].hits == 0
    assert requests[0]["tuning"] == [] and requests[1]["tuning"] == []

    replies.append({"source": "C = 3\n", "summary": "warm", "tuning": {"observations": []}})
    asyncio.run(executor.implement(_context(), plan, 2))
    assert requests[2]["tuning"] == [record.as_request()]  # the next request carries it
    store.close()


def test_a_malformed_tuning_reply_is_a_note_not_a_crash(tmp_path, monkeypatch):
    bad = {"first_call_s": 2.0, "observations": [observed(config={"BLOCK_M": -1})]}
    replies = [
        {"source": "A = 1\n", "summary": "s", "tuning": bad},
        {"source": "B = 1\n", "summary": "s", "tuning": {"error": "RuntimeError: boom"}},
    ]
    executor, store, fake = _executor(tmp_path, replies, [])
    monkeypatch.setattr(offline_roles, "run_child", fake)
    plan = Plan("Triton GEMM", "triton-gemm")
    first = asyncio.run(executor.implement(_context(), plan, 0))
    assert (
        first.source == "A = 1\n" and "not remembered" in first.notes and "BLOCK_M" in first.notes
    )
    second = asyncio.run(executor.implement(_context(), plan, 1))
    assert "not read: RuntimeError: boom" in second.notes
    executor.verified("A = 1\n")
    assert TuningMemory(store).recall("triton-gemm") == []
    store.close()


def test_the_real_child_takes_a_request_with_remembered_tiles_on_the_cpu(tmp_path):
    """The sandboxed child reads the remembered entries (this device's: "cpu") before the
    pass runs; the pass then declines the CPU as it always does, and nothing is pending."""
    with MemoryStore(tmp_path / "m.sqlite3") as store:
        memory = TuningMemory(store)
        memory.record(observation_from("triton-gemm", observed(device="cpu")))
        options = EvalOptions(threads=1, jail=False)
        executor = OfflineExecutor(SourceFile(RELU, "relu.py"), options, tuning=memory)
        context = PlanningContext(RELU, RELU, 1.0, "cpu")
        done = asyncio.run(executor.implement(context, Plan("Triton GEMM", "triton-gemm"), 0))
    assert done.source is None and "run on CUDA" in done.error, done.error
    assert executor.tuning_s == 0.0 and not executor._pending


# -- the search tells the executor which candidates were verified -----------------------------

PROBLEM = ROOT / "bench" / "problems" / "13_gemm_divide_sum_scaling.py"
PLANTED = (ROOT / "examples" / "gemm_divide_sum_scale_new.py").read_text()
BROKEN = PLANTED.replace("self.weight.sum(dim=0)", "self.weight.sum(dim=1)")


class OnePlan:
    label = "test"

    async def plan(self, context: PlanningContext) -> Plan | None:
        return Plan("Sum the weight rows first", "algebra") if context.seed == 0 else None


class TwoSamples:
    """Sample 0 is correct, sample 1 is not; records what the search calls verified."""

    label = "test"

    def __init__(self) -> None:
        self.verified_sources: list[str] = []

    async def implement(self, context: PlanningContext, plan: Plan, sample: int) -> Candidate:
        return Candidate(PLANTED if sample == 0 else BROKEN)

    def verified(self, source: str) -> None:
        self.verified_sources.append(source)


def test_the_search_reports_only_correct_candidates_as_verified(tmp_path):
    executor = TwoSamples()

    async def go():
        with MemoryStore(tmp_path / "m.sqlite3") as store:
            search = Search(
                SourceFile(PROBLEM.read_text(), str(PROBLEM)),
                Roles(OnePlan(), executor, None, None),  # type: ignore[arg-type]
                CostMeter(),
                options=EvalOptions(threads=1, timing_budget_s=0.2, jail=False),
                config=SearchConfig(
                    beam=1, plans=1, samples=2, iterations=1, patience=1, profile=False
                ),
                budget=Budget(max_evals=4),
                memory=SearchMemory(ExperienceStore(store), Logbook(store)),
            )
            return await run_search(search)

    result = asyncio.run(go())
    verdicts = sorted(p.verdict for p in result.trajectory)
    assert "correct" in verdicts and len(verdicts) == 2 and verdicts[0] != verdicts[1]
    assert executor.verified_sources == [PLANTED]


# -- the child's probe, in Triton's CPU interpreter -------------------------------------------

_PROBE = """
import json, sys
import triton.runtime.autotuner as autotuner
from agents.offline.fx.tracing import apply_general_first
from agents.offline.passes.triton_gemm import TritonGemm
from agents.offline.passes.triton_gemm_tuning import observe
from memory.tuning import site_key
from tests.integration.test_triton_gemm import linear_problem, program

# The interpreter cannot benchmark: a config's "time" is its BLOCK_M, so the smallest wins.
autotuner.Autotuner._bench = lambda self, *a, config, **k: [float(config.kwargs["BLOCK_M"])] * 3
prog = program(linear_problem("torch.relu(y)"), device="cpu")
prog.device = "cuda"  # the pass is written for CUDA; the interpreter runs it on the CPU
prog.tuning = json.loads(sys.argv[1])
rewrite = apply_general_first(TritonGemm(), prog)
prog.device = "cpu"
prog.source, prog.module = rewrite.source, None
print(json.dumps(observe(prog, rewrite.tuning_sites, "cpu")))
"""


def _probe(tuning: dict) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(tuning)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_probe_reads_the_tuned_winner_in_the_interpreter():
    cold = _probe({})
    (seen,) = cold["observations"]
    smallest = min(TILES, key=lambda t: t.block_m)
    assert seen["config"] == tile_config(smallest) and seen["time_ms"] == smallest.block_m
    assert seen["from_memory"] is False and seen["device_name"] == "cpu"
    assert (seen["op_signature"], seen["shape_class"]) == (SIGNATURE, SHAPE)
    assert cold["first_call_s"] > 0
    observation_from("triton-gemm", seen)  # what the parent will accept

    chosen = tile_config(TILES[0])
    warm = _probe({site_key(SIGNATURE, SHAPE): chosen})
    (again,) = warm["observations"]
    assert again["config"] == chosen and again["from_memory"] is True
    assert again["time_ms"] is None and again["tuning_s"] == 0.0  # nothing was benchmarked


# -- the bench --------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_the_bench_refuses_cuda_without_a_gpu_in_one_line():
    done = subprocess.run(
        [sys.executable, "bench/self_improvement.py", "--device", "cuda", "--only", "01"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "CUDA" in done.stderr


def test_the_bench_report_shows_tuning_seconds():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import self_improvement
    finally:
        sys.path.remove(str(ROOT / "bench"))
    row = {
        "problem": "09_gemm_relu",
        "evaluations_to_best": 3,
        "evaluations": 8,
        "speedup": 2.0,
        "tuning_s": 40.0,
    }
    report = {
        "date": "d",
        "machine": "m",
        "llm": "offline",
        "total_s": 1.0,
        "command": "c",
        "cold": [row],
        "warm": [{**row, "evaluations_to_best": 1, "tuning_s": 4.0}],
        "improved_both": 1,
        "evaluations_to_best_cold": 3,
        "evaluations_to_best_warm": 1,
        "median_ratio_warm_over_cold": 0.33,
        "evaluations_cold": 8,
        "evaluations_warm": 8,
        "geomean_speedup_cold": 2.0,
        "geomean_speedup_warm": 2.0,
        "tuning_s_cold": 40.0,
        "tuning_s_warm": 4.0,
    }
    text = self_improvement.markdown(report)
    assert "| 09_gemm_relu | 3 / 8 | 2.00x | 40.0 | 1 / 8 | 2.00x | 4.0 |" in text
    assert "autotuning on their first calls in the pass: cold 40.0, warm 4.0" in text


# -- on a GPU -----------------------------------------------------------------------------------


@pytest.mark.cuda
@CUDA
def test_cuda_a_warm_run_compiles_the_remembered_tile_only(tmp_path):
    """The executor end to end on a GPU (the real sandboxed child): a cold candidate tunes
    the table, verified it is remembered, and the next candidate takes that tile alone."""
    store = MemoryStore(tmp_path / "m.sqlite3")
    options = EvalOptions(device="cuda", threads=1, jail=False)
    executor = OfflineExecutor(SourceFile(RELU, "relu.py"), options, tuning=TuningMemory(store))
    plan = Plan("Triton GEMM", "triton-gemm")
    cold = asyncio.run(executor.implement(_context(), plan, 0))
    cold_s = executor.tuning_s
    assert cold.source is not None and "0 with their tile from memory" in cold.notes, cold.notes
    executor.verified(cold.source)
    (record,) = TuningMemory(store).recall("triton-gemm")
    assert record.key.device_name == torch.cuda.get_device_name()
    assert record.time_ms is not None and record.tuning_s > 0
    assert record.config in [tile_config(t) for t in TILES]
    warm = asyncio.run(executor.implement(_context(), plan, 1))
    assert warm.source is not None and "1 with their tile from memory" in warm.notes, warm.notes
    assert "tile from memory (" in warm.notes
    warm_s = executor.tuning_s - cold_s
    print(f"\nfirst calls: cold {cold_s:.1f} s, warm {warm_s:.1f} s; {record}")
    assert warm_s < cold_s / 2, (cold_s, warm_s)
    executor.verified(warm.source)
    assert TuningMemory(store).recall("triton-gemm")[0].hits == 1
    store.close()
