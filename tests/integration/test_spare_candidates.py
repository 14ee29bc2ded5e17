"""Spare candidate workers (agents/verify/spares.py): booted during one evaluation, each serves
exactly one later candidate of a new source, with its cache named after that source; none
outlives a cancel, the end of a search or its idle time."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
import time
from dataclasses import replace
from pathlib import Path

from agents.evalpool import LocalPool, PoolSettings
from agents.evaluate import EvalCancelled
from agents.verify.spares import SpareCandidates
from agents.verify.verdict import Verdict
from tests.integration.test_warm_reference import HANG, HONEST, OPTIONS, REFERENCE, SourceFile

# The candidate names its own worker's pid in a runtime error: which process served it.
WHO = SourceFile(
    HONEST.text.replace(
        "    def forward(self, x):\n",
        "    def forward(self, x):\n        raise RuntimeError(f'served by {os.getpid()}')\n",
    ).replace("import torch\n", "import os\n\nimport torch\n", 1),
    "who.py",
)
WHO_TOO = SourceFile(WHO.text.replace("served by", "served  by"), "who_too.py")


def _served_by(reasons: list[str]) -> int:
    (pid,) = {int(m) for r in reasons for m in re.findall(r"served\s+by (\d+)", r)}
    return pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _gone(pids: list[int], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(pid) for pid in pids)


def test_each_spare_serves_one_new_source_and_its_cache_takes_the_source_name(tmp_path: Path):
    options = replace(OPTIONS, cache_dir=tmp_path)
    pool = LocalPool(PoolSettings(build_slots=1))
    seen: list[tuple[Verdict, list[str], list[int]]] = []

    async def main():
        for candidate in (HONEST, WHO, WHO, WHO_TOO, HONEST):
            result = await pool.submit(REFERENCE, candidate, options)
            seen.append((result.verdict, result.reasons, pool.spare_candidate_pids()))

    try:
        asyncio.run(main())
    finally:
        pool.close()
    verdicts = [verdict for verdict, _, _ in seen]
    assert verdicts == [Verdict.CORRECT] + [Verdict.RUNTIME_ERROR] * 3 + [Verdict.CORRECT]
    spares = [pids for _, _, pids in seen]
    assert all(len(pids) == 1 for pids in spares), spares
    # The second candidate (a new source) ran in the spare booted during the first...
    assert _served_by(seen[1][1]) == spares[0][0]
    # ...the same source again starts afresh (its cache exists), leaving the spare idle...
    assert _served_by(seen[2][1]) not in spares[1] + spares[0]
    # ...and a new source takes the spare booted meanwhile: never one process for two.
    served = [_served_by(reasons) for _, reasons, _ in seen[1:4]]
    assert len(set(served)) == 3 and spares[2][0] != spares[1][0]
    assert _served_by(seen[3][1]) in spares[2]
    links = sorted(p for p in (tmp_path / "build").iterdir() if p.is_symlink())
    assert len(links) == 2  # WHO and WHO_TOO, each linked to the spare that first served it
    assert all(os.readlink(link).startswith("spare-") and link.is_dir() for link in links)
    assert pool.spare_candidate_pids() == [] and _gone([pids[0] for pids in spares])


def test_a_cancelled_evaluation_leaves_no_spare_behind(tmp_path: Path):
    pool = LocalPool(PoolSettings(build_slots=1))
    cancel = threading.Event()
    limits = replace(OPTIONS.limits, run_timeout_s=60)
    options = replace(OPTIONS, limits=limits, cache_dir=tmp_path)

    async def main():
        assert (await pool.submit(REFERENCE, HONEST, options)).verdict is Verdict.CORRECT
        idle = pool.spare_candidate_pids()
        task = asyncio.ensure_future(pool.submit(REFERENCE, HANG, options, cancel))
        for _ in range(400):  # the hanging candidate runs in the spare; a new one boots
            await asyncio.sleep(0.05)
            if pool.running_pids() and not pool.spare_candidate_pids():
                break
        await asyncio.sleep(1.0)
        cancel.set()
        with contextlib.suppress(EvalCancelled):
            outcome = await task
            raise AssertionError(f"not cancelled: {outcome.verdict}: {outcome.reasons}")
        return idle

    try:
        idle = asyncio.run(main())
        assert len(idle) == 1 and _gone(idle)
        assert pool.spare_candidate_pids() == []
    finally:
        pool.close()


def test_spares_close_at_the_end_of_a_search_and_after_their_idle_time():
    pool = LocalPool(PoolSettings(build_slots=1))
    try:
        asyncio.run(pool.submit(REFERENCE, HONEST, OPTIONS))
        (spare,) = pool.spare_candidate_pids()
        pool.release_warm_workers()
        assert pool.spare_candidate_pids() == [] and _gone([spare])

        pool._spares = SpareCandidates(idle_s=0.5)  # the pool's own, with a short idle time
        asyncio.run(pool.submit(REFERENCE, HONEST, OPTIONS))
        (spare,) = pool.spare_candidate_pids()
        deadline = time.monotonic() + 10
        while pool.spare_candidate_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.spare_candidate_pids() == [] and _gone([spare])
    finally:
        pool.close()
