"""The outside clock's arithmetic: what it subtracts, and when it refuses to subtract.

A timed request holds its calls and the request's own cost (round trip, checksums), which is
measured on the reference and subtracted. A call shorter than that cost's jitter cannot be
told apart from it: subtracting would leave noise (or a clamp at ~0, which once showed as a
956197x "best"), so such a call is counted at the resolution instead (the jitter over the
request's K calls: tests/integration/test_clock_batched.py).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.verify.clock import _Record


def _record(call_s: float, cand_call_s: float, overhead_s: float, jitter_s: float) -> _Record:
    rng = random.Random(7)
    record = _Record()
    for _ in range(40):
        record.overhead.append(overhead_s + rng.uniform(-jitter_s, jitter_s))
        record.ref.append(overhead_s + call_s + rng.uniform(-jitter_s, jitter_s))
        record.cand.append(overhead_s + cand_call_s + rng.uniform(-jitter_s, jitter_s))
    return record


def test_calls_well_above_the_jitter_are_resolved_and_net_of_the_overhead():
    record = _record(call_s=2e-3, cand_call_s=1e-3, overhead_s=175e-6, jitter_s=20e-6)
    assert record.resolved()
    ref, cand = record.net()
    ratio = sorted(ref)[20] / sorted(cand)[20]
    assert 1.9 < ratio < 2.1


def test_a_call_inside_the_jitter_is_not_resolved():
    record = _record(call_s=10e-6, cand_call_s=2e-6, overhead_s=175e-6, jitter_s=50e-6)
    assert not record.resolved()


@settings(max_examples=200, deadline=None)
@given(
    call=st.floats(0.0, 5e-3),
    cand=st.floats(0.0, 5e-3),
    overhead=st.floats(50e-6, 500e-6),
    jitter=st.floats(0.0, 100e-6),
)
def test_resolved_means_both_medians_clear_the_jitter(call, cand, overhead, jitter):
    record = _record(call, cand, overhead, jitter)
    if record.resolved():
        ref_net, cand_net = record.net()
        for side in (ref_net, cand_net):
            assert sorted(side)[len(side) // 2] > record.jitter() * 0.5
    assert record.jitter() >= 5e-6


def test_the_ratio_without_waits_takes_each_requests_wait_out():
    """The reference's requests each waited 4 ms for a CPU, the candidate's did not: the raw
    ratio says 2.6x, the one without the waits 1.0x; the cost besides the calls is net of its
    own waits too."""
    record = _Record()
    for _ in range(20):
        record.overhead.append(0.0015)
        record.overhead_wait.append(0.0005)
        record.ref.append(0.0075)
        record.ref_wait.append(0.004)
        record.cand.append(0.0035)
        record.cand_wait.append(0.0)
    ref, cand = record.net()
    assert ref[0] / cand[0] == pytest.approx(3.0)
    waits = record.waits(floor=1e-9)
    assert waits is not None
    assert waits.speedup == pytest.approx(1.0)
    assert waits.reference_share == pytest.approx(0.004 / 0.0075)
    assert waits.candidate_share == 0.0


def test_an_unread_wait_gives_no_ratio_without_waits():
    record = _record(0.001, 0.001, 0.0002, 0.00001)
    assert record.waits(floor=1e-9) is None
    record.ref_wait.extend([0.0] * len(record.ref))
    record.cand_wait.extend([0.0] * len(record.cand))
    record.overhead_wait.extend([None] * len(record.overhead))
    assert record.waits(floor=1e-9) is None
