"""A search's reference worker is kept warm between candidates (agents/verify/keeper.py):
the same verdicts as with a fresh worker, whatever the last candidate did, and never kept
after an evaluation that did not end cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from dataclasses import replace

from agents.evalpool import LocalPool, PoolSettings
from agents.evaluate import EvalCancelled
from agents.sandbox.process import Limits
from agents.task import SourceFile
from agents.verify.keeper import ReferenceKeeper
from agents.verify.verdict import Verdict
from tests.conftest import FAST, ROOT

EXAMPLES = ROOT / "examples"
REFERENCE = SourceFile.from_path(EXAMPLES / "gemm_divide_sum_scale.py")
HONEST = SourceFile.from_path(EXAMPLES / "gemm_divide_sum_scale_new.py")
STALE = SourceFile.from_path(EXAMPLES / "gemm_divide_sum_scale_stale.py")
CACHED = SourceFile.from_path(EXAMPLES / "gemm_divide_sum_scale_cached.py")
HANG = SourceFile(
    HONEST.text.replace(
        "    def forward(self, x):\n",
        "    def forward(self, x):\n        while True:\n            x = x + 1\n",
    ),
    "hang.py",
)
OPTIONS = replace(
    FAST,
    jail=False,
    measure=False,
    limits=Limits(build_timeout_s=60, run_timeout_s=30, address_space_bytes=6 * 1024**3),
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_one_reference_worker_serves_every_candidate_and_each_gets_its_fresh_verdict():
    """A stale candidate leaves the reference perturbed by the reload check; the candidates
    after it are judged from the reference's own start all the same."""
    pool = LocalPool(PoolSettings(build_slots=1))
    order = [HONEST, STALE, HONEST, CACHED, HONEST]
    verdicts, kept = [], []

    async def main():
        for candidate in order:
            result = await pool.submit(REFERENCE, candidate, OPTIONS)
            verdicts.append(result.verdict)
            kept.append(pool.warm_reference_pids())

    try:
        asyncio.run(main())
        assert verdicts == [
            Verdict.CORRECT,
            Verdict.INCORRECT,
            Verdict.CORRECT,
            Verdict.INCORRECT,
            Verdict.CORRECT,
        ]
        assert len(kept[0]) == 1 and all(pids == kept[0] for pids in kept), kept
        assert _alive(kept[0][0])
    finally:
        pool.close()
    assert pool.warm_reference_pids() == []
    deadline = time.monotonic() + 10
    while _alive(kept[0][0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(kept[0][0])


def test_a_cancelled_evaluation_keeps_no_reference_worker():
    pool = LocalPool(PoolSettings(build_slots=1))
    cancel = threading.Event()

    async def main():
        first = await pool.submit(REFERENCE, HONEST, OPTIONS)
        assert first.verdict is Verdict.CORRECT
        warm = pool.warm_reference_pids()
        task = asyncio.ensure_future(pool.submit(REFERENCE, HANG, OPTIONS, cancel))
        for _ in range(400):
            await asyncio.sleep(0.05)
            if len(pool.running_pids()) == 2:
                break
        await asyncio.sleep(1.0)
        cancel.set()
        with contextlib.suppress(EvalCancelled):
            outcome = await task
            raise AssertionError(f"not cancelled: {outcome.verdict}: {outcome.reasons}")
        return warm

    try:
        warm = asyncio.run(main())
        assert len(warm) == 1
        assert pool.warm_reference_pids() == []  # taken by the cancelled job, then closed
        deadline = time.monotonic() + 10
        while _alive(warm[0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(warm[0])
    finally:
        pool.close()


def test_a_different_reference_gets_a_worker_of_its_own():
    other = SourceFile(
        REFERENCE.text.replace("SCALING_FACTOR = 1.5", "SCALING_FACTOR = 2.5"), "b.py"
    )
    assert other.text != REFERENCE.text
    pool = LocalPool(PoolSettings(build_slots=1))

    async def main():
        await pool.submit(REFERENCE, HONEST, OPTIONS)
        first = pool.warm_reference_pids()
        result = await pool.submit(other, HONEST, OPTIONS)
        return first, pool.warm_reference_pids(), result

    try:
        first, both, result = asyncio.run(main())
        assert result.verdict is Verdict.CORRECT
        assert len(both) == 2 and first[0] in both
    finally:
        pool.close()


def test_an_idle_worker_is_closed_after_the_idle_time():
    keeper = ReferenceKeeper(idle_s=3)  # long enough that the worker is still idle, not yet
    # closed, when submit returns on a loaded machine (0.5 s once was not)
    pool = LocalPool(PoolSettings(build_slots=1))
    pool._keeper = keeper  # the pool's own keeper, with a short idle time
    try:
        asyncio.run(pool.submit(REFERENCE, HONEST, OPTIONS))
        (pid,) = keeper.idle_pids()
        deadline = time.monotonic() + 15
        while (keeper.idle_pids() or _alive(pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert keeper.idle_pids() == [] and not _alive(pid)
    finally:
        pool.close()
