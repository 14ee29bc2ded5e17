"""A worker's wait for a CPU over one awake spell (agents/sandbox/peer.py): what the outside
clock takes out of each timed request before it trusts a ratio (agents/verify/stability.py)."""

from __future__ import annotations

import os

from agents.sandbox.inspect import run_delays
from agents.sandbox.peer import _waited_since


def test_a_cgroups_pressure_totals_give_the_spells_wait():
    assert _waited_since(1.5, 1.75) == 0.25
    assert _waited_since(1.5, 1.5) == 0.0


def test_without_a_cgroup_the_longest_thread_wait_counts():
    before = {(1, 1): 1_000, (1, 2): 5_000}
    after = {(1, 1): 3_000_000, (1, 2): 6_000, (1, 3): 2_000_000}  # thread 3 is new
    assert _waited_since(before, after) == 2_999_000 / 1e9


def test_an_unread_side_gives_no_wait():
    assert _waited_since(None, 1.0) is None
    assert _waited_since({(1, 1): 0}, None) is None
    assert _waited_since(1.0, {(1, 1): 0}) is None


def test_run_delays_read_every_thread_of_a_process():
    delays = run_delays([os.getpid()])
    assert (os.getpid(), os.getpid()) in delays
    assert all(value >= 0 for value in delays.values())
    assert run_delays([2**22 + 12345]) == {}  # no such process: nothing, no error
