"""The start-up deadline (agents/sandbox/startup.py): it moves while the worker's tree uses
CPU, ends `stall_s` after the last progress, and never later than `cap_s`."""

from __future__ import annotations

from agents.sandbox.startup import ProgressDeadline
from agents.sandbox.wire import WaitPolicy


class FakeWorker:
    def __init__(self) -> None:
        self.now = 0.0
        self.cpu = 0.0
        self.paused = 0.0

    def clock(self) -> float:
        return self.now

    def run(self, seconds: float, busy: bool) -> None:
        """Advance by half-second steps, the worker using CPU in each step when busy."""
        for _ in range(int(seconds / 0.5)):
            self.now += 0.5
            if busy:
                self.cpu += 0.1


def policy_for(worker: FakeWorker, watch: ProgressDeadline) -> WaitPolicy:
    policy = WaitPolicy(watch.stall_s, paused_s=watch, started=worker.now)
    return policy


def remaining(worker: FakeWorker, policy: WaitPolicy, monkeypatch) -> float:
    monkeypatch.setattr("agents.sandbox.wire.time.monotonic", worker.clock)
    return policy.remaining()


def watched(worker: FakeWorker, **bounds) -> ProgressDeadline:
    return ProgressDeadline(lambda: worker.cpu, lambda: worker.paused, clock=worker.clock, **bounds)


def test_a_slow_worker_that_keeps_using_cpu_is_never_cut_before_the_cap(monkeypatch):
    worker = FakeWorker()
    watch = watched(worker, stall_s=5, cap_s=100)
    policy = policy_for(worker, watch)
    for _ in range(18):  # 90 s of slow, steady start-up: far past the 5 s stall window
        worker.run(5, busy=True)
        assert remaining(worker, policy, monkeypatch) > 0
    worker.run(15, busy=True)
    assert remaining(worker, policy, monkeypatch) <= 0  # the cap
    assert "still starting after 100 s" in watch.why()


def test_a_worker_that_uses_no_cpu_fails_stall_s_after_its_last_progress(monkeypatch):
    worker = FakeWorker()
    watch = watched(worker, stall_s=5, cap_s=100)
    policy = policy_for(worker, watch)
    worker.run(20, busy=True)
    for _ in range(9):  # 4.5 s idle: still within the window
        worker.run(0.5, busy=False)
        assert remaining(worker, policy, monkeypatch) > 0
    worker.run(1, busy=False)
    assert remaining(worker, policy, monkeypatch) <= 0
    assert "used no CPU for 5 s" in watch.why()


def test_time_a_pool_kept_it_stopped_extends_the_deadline(monkeypatch):
    worker = FakeWorker()
    watch = watched(worker, stall_s=5, cap_s=100)
    policy = policy_for(worker, watch)
    worker.run(4, busy=False)
    worker.paused += 30  # stopped by the pool while another candidate was timed
    worker.run(30, busy=False)
    assert remaining(worker, policy, monkeypatch) > 0
    worker.run(2, busy=False)
    assert remaining(worker, policy, monkeypatch) <= 0


def test_an_unreadable_cpu_count_leaves_only_the_cap(monkeypatch):
    worker = FakeWorker()
    watch = ProgressDeadline(lambda: None, clock=worker.clock, stall_s=5, cap_s=60)
    policy = policy_for(worker, watch)
    worker.run(50, busy=False)
    assert remaining(worker, policy, monkeypatch) > 0
    worker.run(12, busy=False)
    assert remaining(worker, policy, monkeypatch) <= 0
