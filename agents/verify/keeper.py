"""Warm reference workers, kept between the evaluations of one search.

Why: every candidate of a search is judged against the same reference, and a fresh
reference worker pays the interpreter, torch's import and, on the GPU, CUDA's start-up (a
second on the CPU here, several on a GPU) before the first candidate's trial. The reference's
worker never runs candidate code, so it can serve the next candidate: it is handed back here
only when every request of the evaluation got its answer and it is still running, and each
evaluation's first request ("load") makes it drop everything of the last one (`Side.forget`).
The candidate's worker is never kept: it ran untrusted code.

Keyed by everything that shapes the worker: the reference's text and path, device, threads,
limits, jail and environment (a pool pins GPU lanes through CUDA_VISIBLE_DEVICES).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor

from agents.sandbox.peer import Peer, WorkerError
from agents.task import SourceFile
from agents.verify.workers import WorkerSettings, start_worker

PING_TIMEOUT_S = 5.0
IDLE_S = 30.0
"""A kept worker unused this long is closed: a search's candidates come seconds apart, and an
idle torch process holds hundreds of MB (a pool nobody closes must not hoard them)."""


def reference_key(reference: SourceFile, settings: WorkerSettings, size: str) -> Hashable:
    text = hashlib.sha256(reference.text.encode()).hexdigest()
    env = tuple(sorted(settings.env_extra.items()))
    limits = repr(settings.limits)
    return (
        text,
        reference.path,
        size,
        settings.device,
        settings.threads,
        settings.jail,
        limits,
        env,
    )


class ReferenceKeeper:
    """Idle reference workers by key, at most `capacity` in all (the least recently used
    is closed first). Thread-safe: a pool's jobs take and give from their own threads."""

    def __init__(self, capacity: int = 4, idle_s: float = IDLE_S) -> None:
        self.capacity = capacity
        self.idle_s = idle_s
        self._since: dict[int, float] = {}  # id(peer) -> when it was given back
        self._idle: OrderedDict[Hashable, list[Peer]] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = False
        # A sandboxed child dies with the thread that started it (PR_SET_PDEATHSIG and
        # bubblewrap's --die-with-parent follow the thread, not the process): a worker that
        # outlives its job's thread is started from this one, which lives as long as we do.
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="kernel-agent-keeper")

    def start(self, settings: WorkerSettings) -> Peer:
        """A fresh reference worker, started from the keeper's own thread."""
        return self._spawner.submit(start_worker, "reference", settings, None).result()

    def take(self, key: Hashable, settings: WorkerSettings) -> Peer | None:
        """An idle worker for `key` that still answers, rebound to this evaluation's cancel
        and pause clocks; None when there is none."""
        while True:
            with self._lock:
                peers = self._idle.get(key)
                if not peers:
                    return None
                peer = peers.pop()
                self._since.pop(id(peer), None)
                if not peers:
                    del self._idle[key]
            peer.cancelled = settings.cancelled
            peer.paused_s = settings.paused_s
            if peer.alive():
                try:
                    peer.request("ping", PING_TIMEOUT_S)
                    peer.forget_tree()
                    return peer
                except WorkerError:
                    pass
            peer.close()

    def give(self, key: Hashable, peer: Peer) -> None:
        """Keep `peer` for the next evaluation of `key`, or close it when it cannot serve."""
        if self._closed or not peer.clean or peer.stopped or not peer.alive():
            peer.close()
            return
        peer.cancelled = _never
        peer.paused_s = _no_pause
        evicted = []
        with self._lock:
            self._since[id(peer)] = time.monotonic()
            self._idle.setdefault(key, []).append(peer)
            self._idle.move_to_end(key)
            while sum(len(peers) for peers in self._idle.values()) > self.capacity:
                oldest, peers = next(iter(self._idle.items()))
                evicted.append(peers.pop(0))
                self._since.pop(id(evicted[-1]), None)
                if not peers:
                    del self._idle[oldest]
        for old in evicted:
            old.close()
        timer = threading.Timer(self.idle_s + 0.1, self._expire)
        timer.daemon = True
        timer.start()

    def _expire(self) -> None:
        """Close the workers idle for `idle_s` or longer."""
        now, expired = time.monotonic(), []
        with self._lock:
            for key in list(self._idle):
                peers = self._idle[key]
                keep = [p for p in peers if now - self._since.get(id(p), now) < self.idle_s]
                expired += [p for p in peers if p not in keep]
                if keep:
                    self._idle[key] = keep
                else:
                    del self._idle[key]
            for peer in expired:
                self._since.pop(id(peer), None)
        for peer in expired:
            peer.close()

    def idle_pids(self) -> list[int]:
        with self._lock:
            return [peer.process.pid for peers in self._idle.values() for peer in peers]

    def reopen(self) -> None:
        self._closed = False

    def close(self) -> None:
        """Close every idle worker; workers given back afterwards are closed at once, until
        `reopen`."""
        with self._lock:
            self._closed = True
            peers = [peer for group in self._idle.values() for peer in group]
            self._idle.clear()
        for peer in peers:
            peer.close()


def _never() -> bool:
    return False


def _no_pause() -> float:
    return 0.0
