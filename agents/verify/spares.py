"""Spare candidate workers: started before their candidate is known, one per evaluation.

Why: a candidate's worker pays the interpreter, torch's import and, on the GPU, CUDA's
start-up before its build can begin, and that time sits on every verdict's critical path
(the reference's worker is kept warm instead: agents/verify/keeper.py). A worker that has
only said hello has run no candidate code, so one can be started during an evaluation's own
build, sleep until the next candidate of the search arrives, and serve exactly that one
candidate. It is never given back: a worker that ran a candidate is closed with it.

Each spare has a fresh cache directory of its own (`build/spare-<token>`); the candidate that
takes it links its source's cache name to it (`build/<source hash>` -> `spare-<token>`), so a
later evaluation of the same source, started fresh, finds its builds at the very same path.
A spare is taken only for a source that has no cache yet, so no two sources share one.

Keyed by everything that shapes a candidate worker: device, threads, limits, jail and the
environment (a pool pins GPU lanes through CUDA_VISIBLE_DEVICES).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from agents.sandbox.peer import Peer, WorkerError
from agents.verify.keeper import IDLE_S, PING_TIMEOUT_S, _never, _no_pause
from agents.verify.workers import WorkerSettings, say_hello, start_worker

SPARE_PREFIX = "spare-"
WAIT_S = 120.0
"""The longest an evaluation waits for the spare it boots (a worker's hello, normally 1-3 s)."""


def candidate_key(settings: WorkerSettings) -> Hashable:
    env = tuple(sorted(settings.env_extra.items()))
    return (settings.device, settings.threads, repr(settings.limits), settings.jail, env)


def link_cache(own_cache: Path, spare: Peer) -> None:
    """Name the spare's cache after the source it now serves (relative link, same folder)."""
    spare_dir = spare.launched.cache_dir if spare.launched is not None else None
    if spare_dir is None:
        return
    with contextlib.suppress(FileExistsError):  # the same source judged at once elsewhere
        os.symlink(spare_dir.name, own_cache)


class Booting:
    """A spare on its way up, owned by the evaluation it boots during until `settle`."""

    def __init__(self) -> None:
        self.future: Future[Peer] | None = None
        self._pid: int | None = None
        self._aborted = False
        self._lock = threading.Lock()

    def started(self, pid: int) -> None:
        with self._lock:
            self._pid = pid
            aborted = self._aborted
        if aborted:
            raise WorkerError("the evaluation ended before its spare booted")

    def wait(self, timeout: float = WAIT_S) -> bool:
        """Until the spare said hello or failed to (either way it no longer competes)."""
        if self.future is not None:
            with contextlib.suppress(Exception):
                self.future.exception(timeout)
        return True

    def settle(self, spares: SpareCandidates, key: Hashable, keep: bool) -> None:
        """Hand the booted spare to `spares` when the evaluation ended with a verdict;
        otherwise kill it now, without waiting for its hello (a cancel must be prompt)."""
        if not keep:
            with self._lock:
                self._aborted, pid = True, self._pid
            if pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)  # a hello in flight fails, and is closed
            if self.future is not None:
                self.future.add_done_callback(_close_if_booted)  # one that got through
            return
        if self.future is None:
            return
        try:
            peer = self.future.result(WAIT_S)
        except Exception:  # it failed to boot: the next candidate starts a worker itself
            return
        spares.give(key, peer)


class SpareCandidates:
    """Booted candidate workers by key, at most `capacity` in all. Thread-safe."""

    def __init__(self, capacity: int = 2, idle_s: float = IDLE_S) -> None:
        self.capacity = capacity
        self.idle_s = idle_s
        self._idle: dict[Hashable, list[tuple[float, Peer]]] = {}
        self._lock = threading.Lock()
        self._closed = False
        # A sandboxed child dies with the thread that started it (PR_SET_PDEATHSIG), and a
        # spare outlives the evaluation whose build it booted during: start it from here.
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="kernel-agent-spare")

    def start(
        self, settings: WorkerSettings, cache_root: Path, on_started: Callable[[int], None]
    ) -> Booting:
        """Boot a spare in the background; `on_started(pid)` lets the caller's pool stop it
        with the evaluation's other workers while another candidate is timed."""
        quiet = replace(settings, cancelled=_never, paused_s=_no_pause)
        booting = Booting()

        def boot() -> Peer:
            cache = cache_root / f"{SPARE_PREFIX}{secrets.token_hex(8)}"
            peer = start_worker("candidate", quiet, cache)
            try:
                booting.started(peer.process.pid)
                on_started(peer.process.pid)
                say_hello(peer, quiet)
            except BaseException:
                _close_unused(peer)
                raise
            return peer

        booting.future = self._spawner.submit(boot)
        return booting

    def give(self, key: Hashable, peer: Peer) -> None:
        """Keep a booted spare for the next candidate of `key`, or close it."""
        if self._closed or not peer.alive():
            _close_unused(peer)
            return
        evicted = []
        with self._lock:
            self._idle.setdefault(key, []).append((time.monotonic(), peer))
            while sum(len(peers) for peers in self._idle.values()) > self.capacity:
                oldest = min(self._idle, key=lambda k: self._idle[k][0][0])
                evicted.append(self._idle[oldest].pop(0)[1])
                if not self._idle[oldest]:
                    del self._idle[oldest]
        for old in evicted:
            _close_unused(old)
        timer = threading.Timer(self.idle_s + 0.1, self._expire)
        timer.daemon = True
        timer.start()

    def take(self, key: Hashable, settings: WorkerSettings) -> Peer | None:
        """A booted spare that still answers, bound to this evaluation's clocks; or None."""
        while True:
            with self._lock:
                peers = self._idle.get(key)
                if not peers:
                    return None
                _, peer = peers.pop()
                if not peers:
                    del self._idle[key]
            peer.cancelled = settings.cancelled
            peer.paused_s = settings.paused_s
            if peer.alive():
                try:
                    peer.request("ping", PING_TIMEOUT_S)
                    return peer
                except WorkerError:
                    pass
            _close_unused(peer)

    def _expire(self) -> None:
        now, expired = time.monotonic(), []
        with self._lock:
            for key in list(self._idle):
                keep = [(t, p) for t, p in self._idle[key] if now - t < self.idle_s]
                expired += [p for t, p in self._idle[key] if now - t >= self.idle_s]
                if keep:
                    self._idle[key] = keep
                else:
                    del self._idle[key]
        for peer in expired:
            _close_unused(peer)

    def idle_pids(self) -> list[int]:
        with self._lock:
            return [peer.process.pid for peers in self._idle.values() for _, peer in peers]

    def reopen(self) -> None:
        self._closed = False

    def close(self) -> None:
        """Close every idle spare; spares given afterwards are closed at once, until
        `reopen`."""
        with self._lock:
            self._closed = True
            peers = [peer for group in self._idle.values() for _, peer in group]
            self._idle.clear()
        for peer in peers:
            _close_unused(peer)


def _close_if_booted(future: Future[Peer]) -> None:
    if not future.cancelled() and future.exception() is None:
        _close_unused(future.result())


def _close_unused(peer: Peer) -> None:
    """Close a spare that served no candidate, and remove its (empty) cache directory."""
    peer.close()
    cache = peer.launched.cache_dir if peer.launched is not None else None
    if cache is not None and cache.name.startswith(SPARE_PREFIX):
        shutil.rmtree(cache, ignore_errors=True)
