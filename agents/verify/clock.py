"""Timing from outside: the parent's clock around requests to two separate processes.

Why: any clock, event or synchronise inside the candidate's process is the candidate's to
fake. Here a timed request is "make your K calls, each on its own inputs drawn just before,
then send the commitments of all K outputs under this key", and its reply. The parent's clock
brackets it. A commitment (agents/verify/commitment.py) is a keyed nonlinear function of
every element that no identity moves onto the inputs; because the key arrives with the
request, the reply cannot come before every output exists: work started early in the
background or finished late is inside the bracket or is caught by the commitments.
K calls a request, not one: a request costs a round trip (and on the GPU a context switch)
whose size and jitter would otherwise cap any speedup of a short call; K is chosen from the
untimed warm-up rounds so that a request lasts about `ClockConfig.request_s` (20 ms), the
same K on both sides, capped by the memory K input sets and outputs take and by the slower
side's request length (K = 1 for long calls).
Around that:
- every call of every request has inputs freshly drawn from a seed of the parent's (the K
  sets drawn in the `prepare` request before the clock starts), so nothing can be replayed
  or memoised; each call first seeds torch's generators from its own seed, so random ops
  (dropout) draw the same numbers on both sides call by call;
- reference and candidate alternate (ABBA), and both are stopped whenever they are not
  answering a request (each frozen whole in its own cgroup, processes forked later included,
  or else SIGSTOP to every process, re-read at every stop: agents/sandbox/peer.py), so
  neither works in the background or takes the CPU from the other's run; a candidate whose
  processes used CPU while stopped, or that started processes once timing began, is
  refused; both are treated alike, so the treatment costs both the same;
- each timed request follows an untimed call of the same side on other inputs, so it runs as
  a caller's repeated calls do (caches and TLB its own), not as the first call after the other
  process ran; the timed inputs are drawn after that call, so it cannot work on them;
- what the bracket holds besides the calls (the round trip, the checksums and, on the CPU,
  the seeding) is measured on the reference alone (the same request less its calls, right
  after its timed one) and subtracted from both; a call's time is what is left over K:
  nothing the candidate reports about itself is ever subtracted;
- calls are opened at random (agents/verify/openings.py: every request for small outputs, a
  share for large ones, several calls of the first), picked with the system's randomness
  once all commitments are in: fetched in full, compared with the reference's output and the
  float64 anchor, and their commitment recomputed from those bytes by the reference's
  process, which must equal the candidate's claim (agents/verify/proof.py);
- every draw of the parent's (input seeds, keys, openings, spot checks) comes from the
  system's randomness, never a seeded generator a worker could reconstruct from its seeds;
- drawing inputs is measured on both sides, in the CPU time of each worker's whole tree and
  in wall time: a candidate that spends more there in both (working on the inputs before
  the clock starts) is refused; on CUDA in wall time (agents/verify/hidden_work.py);
- Python's cyclic collector is held off for the span of each timed request, in the parent
  and in both workers alike (a full collection would land inside one request at random);
- on the GPU the parent flushes the L2 before every timed request and before every overhead
  request (agents/verify/devflush.py: so both sides, and the overhead, start after the same
  context switch), timed from its host: flushes far slower than alone mean work left
  running on the device. The K calls of a request follow each other without a flush, as a
  caller's do; each reads its own inputs, cold since the flush.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agents.request.defaults import EVAL_TIMING_BUDGET_S
from agents.sandbox.peer import Peer
from agents.sandbox.wire import Frame
from agents.verify import devflush, hidden_work, stability
from agents.verify.openings import Opening, OpeningPolicy, Openings
from agents.verify.stability import PressureReading, own_run_delay_s, read_pressure
from agents.verify.timing import (
    PairTiming,
    Sample,
    bootstrap_speedup_ci,
    collector_held_off,
    median_is_stable,
)


class TimingRefused(Exception):
    """The candidate broke the timing's rules; the reason names what was seen."""

    def __init__(self, reason: str, incorrect: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.incorrect = incorrect


@dataclass(frozen=True)
class ClockConfig:
    warmup: int = 1  # the correctness trials ran just before: one round settles both
    min_runs: int = 10
    max_runs: int = 200
    budget_s: float = EVAL_TIMING_BUDGET_S  # evaluate() passes its options' own
    rel_precision: float = 0.01
    spot_share: float = 0.1
    """The least share of timed requests opened (agents/verify/openings.py), whatever the
    output's size; small outputs have every request opened."""
    reverify_above: float = 10.0
    bootstrap: int = 2000
    hidden_share: float = 0.25
    """Drawing inputs may take the candidate longer than the reference by this share of the
    candidate's own time, plus three standard errors and `hidden_floor_s`, before it is
    refused as work done before the clock started."""
    hidden_floor_s: float = 10e-6
    canary_floor_ms: float = 0.25  # host-timed flushes jitter by tens of microseconds
    cuda_graph: bool = False
    request_s: float = 0.02
    """A timed request makes as many calls as last about this long (less where the budget
    cannot hold `min_runs` rounds of four such requests): its own cost is then a small share."""
    max_calls: int = 1000
    calls_bytes: int = 16 << 30
    """The K input sets and outputs of a request take at most `free_share` of the memory free
    on the device (both sides hold theirs at once, and their models need the rest), and at
    most this much. Not 1 GiB: GPU-size problems draw 1-2 GiB a set, and K = 1 there would
    leave their sub-millisecond calls carrying the whole request's cost."""
    free_share: float = 0.25
    slow_request_s: float = 0.1
    """The slower side's requests stay under this (and under half a budget's share of one
    of `min_runs` rounds): K serves the faster side's resolution, and a candidate 40x faster
    than its reference must not make the reference's requests last seconds."""


@dataclass
class _Record:
    calls: int = 1  # K: the calls of each timed request
    ref: list[float] = field(default_factory=list)  # timed requests, seconds
    cand: list[float] = field(default_factory=list)
    overhead: list[float] = field(default_factory=list)  # reference's checksum-only requests
    ref_prepare: list[float] = field(default_factory=list)  # drawing inputs, wall s a call
    cand_prepare: list[float] = field(default_factory=list)
    ref_prepare_cpu: list[float | None] = field(default_factory=list)  # the same, CPU s
    cand_prepare_cpu: list[float | None] = field(default_factory=list)
    flushes: list[float] = field(default_factory=list)  # the parent's L2 flushes, host ms
    ref_wait: list[float | None] = field(default_factory=list)  # of each timed request, the
    cand_wait: list[float | None] = field(default_factory=list)  # seconds its worker waited
    overhead_wait: list[float | None] = field(default_factory=list)  # for a CPU

    def net(self, floor: float = 1e-9) -> tuple[list[float], list[float]]:
        """Per call: timed requests less the median of what a request costs besides its
        calls, over K; never below `floor`."""
        extra, calls = statistics.median(self.overhead), self.calls
        return tuple(  # type: ignore[return-value]
            [max((t - extra) / calls, floor) for t in side] for side in (self.ref, self.cand)
        )

    def waits(self, floor: float) -> stability.Waits | None:
        """The per-call ratio with each request's CPU wait taken out; None if one is unread."""
        sides = ((self.ref, self.ref_wait), (self.cand, self.cand_wait))
        everything = [*self.ref_wait, *self.cand_wait, *self.overhead_wait]
        if not self.overhead or any(w is None for w in everything):
            return None
        if any(len(t) != len(w) for t, w in (*sides, (self.overhead, self.overhead_wait))):
            return None
        extra = statistics.median(
            o - w for o, w in zip(self.overhead, self.overhead_wait, strict=True)
        )
        ref, cand = (
            [max((t - w - extra) / self.calls, floor) for t, w in zip(times, waits, strict=True)]
            for times, waits in sides
        )
        return stability.Waits(
            speedup=statistics.median(ref) / statistics.median(cand),
            reference_share=sum(self.ref_wait) / max(sum(self.ref), 1e-12),
            candidate_share=sum(self.cand_wait) / max(sum(self.cand), 1e-12),
        )

    def resolution(self) -> float:
        """The shortest call a request of K calls tells apart from its own jitter."""
        return self.jitter() / self.calls

    def jitter(self) -> float:
        """The spread (interquartile range) of the requests' own cost, with a 5 us floor."""
        quartiles = statistics.quantiles(self.overhead, n=4) if len(self.overhead) > 1 else []
        spread = quartiles[2] - quartiles[0] if quartiles else 0.0
        return max(spread, 5e-6)

    def resolved(self) -> bool:
        """Both sides' median calls stand clear of the jitter of the cost subtracted."""
        extra, jitter = statistics.median(self.overhead), self.jitter()
        return all(statistics.median(side) - extra > jitter for side in (self.ref, self.cand))


class OutsideClock:
    """Times one candidate against one reference; see the module docstring for the rules.

    `full_check(label, opening)` fetches both current outputs in full and compares them
    with the float64 anchor, and has the reference recompute the opened call's commitment
    from the candidate's bytes, raising TimingRefused when either differs."""

    def __init__(
        self,
        reference: Peer,
        candidate: Peer,
        device: str,
        config: ClockConfig,
        timeout_s: float,
        full_check: Callable[[str, Opening | None], None],
        compare_checksums: Callable[[Frame, Frame, Frame, str], str | None],
        flush_alone_ms: float | None = None,
    ) -> None:
        self.ref, self.cand = reference, candidate
        self.device = device
        self.config = config
        self.timeout_s = timeout_s
        self.request_timeout_s = timeout_s  # grows with K: a request holds K calls
        self.full_check = full_check
        self.compare_checksums = compare_checksums
        self.flush_alone_ms = flush_alone_ms
        self.rng = random.SystemRandom()  # no state a worker could learn from its seeds
        self.openings = Openings(OpeningPolicy(floor_share=config.spot_share))
        self.scales: list[float] = []  # per output leaf, the commitments' (the reference's)
        self.notes: list[str] = []
        self.calls = 1  # K, the same for both sides
        self.footprint: dict[str, int] = {}  # the reference's: one input set, one output
        self.waited: float | None = None  # the last timed request's wait for a CPU

    def measure(self) -> PairTiming:
        config = self.config
        self.ref.stop()
        self.cand.stop()
        try:
            self.scales = list(self._awake(self.ref, "scales").header.get("scales") or [])
            timing = self._measure(config)
            self.notes.append(self.openings.note())
            return timing
        finally:
            self.ref.resume()
            self.cand.resume()

    def _measure(self, config: ClockConfig) -> PairTiming:
        method = self._get_ready(config)
        record = _Record(calls=self.calls)
        pressure = read_pressure(time.monotonic())
        self._sample(record, config, pressure)
        if self._prepare_excess(record):  # a suspicion is confirmed on as many runs again
            for _ in range(max(len(record.ref), config.min_runs)):
                self._iteration(record, len(record.ref), check=False)
            problem = self._prepare_excess(record)
            if problem:
                raise TimingRefused(problem)
        self._check_canary(record)
        ref_s, cand_s = self._net_times(record)
        waits = record.waits(floor=1e-9 if record.resolved() else record.resolution())
        return self._pair_timing(ref_s, cand_s, config, pressure, method, waits)

    def _get_ready(self, config: ClockConfig) -> str:
        """Capture a CUDA graph where asked, warm up, choose K; the method line saying how."""
        method = f"{self.device}: timed from outside both processes, interleaved, fresh inputs"
        replay = ""
        if config.cuda_graph and self.device == "cuda":
            replay = self._capture()
        method += replay
        self._warm_up(batched=not replay)  # a captured graph replays one call a request
        return method + f", {self.calls} {'call' if self.calls == 1 else 'calls'} per timed request"

    def _sample(
        self, record: _Record, config: ClockConfig, pressure: PressureReading | None
    ) -> None:
        """Timed runs until both medians are stable or the budget is spent; a run that cannot
        be trusted (`stability.assess`) is measured again, as long again, once."""
        reverified = False
        for attempt in range(2):
            reverified = self._runs(record, config, attempt, reverified)
            ref_times, cand_times = record.net(
                floor=1e-9 if record.resolved() else record.resolution()
            )
            first = stability.assess(
                ref_times,
                cand_times,
                statistics.median(ref_times) / statistics.median(cand_times),
                bootstrap_speedup_ci(ref_times, cand_times, config.bootstrap),
                stability.stall_share(pressure, read_pressure(time.monotonic())),
                record.waits(floor=1e-9 if record.resolved() else record.resolution()),
            )
            if first.stable or attempt:
                return
            self.notes.append(f"measured again, as long again: {first.reason}")

    def _runs(self, record: _Record, config: ClockConfig, attempt: int, reverified: bool) -> bool:
        """One attempt's timed runs; a ratio over `reverify_above` has the candidate verified
        in full once. Returns whether that re-verification has been done. The budget binds
        from the attempt's sixth round (halves need six): busy, ten rounds took 18-143 s."""
        started = time.monotonic()
        first = len(record.ref)
        while len(record.ref) < config.max_runs * (attempt + 1):
            index = len(record.ref)
            check = index == 0  # the rest: agents/verify/openings.py, at random
            self._iteration(record, index, check=check)
            spent = time.monotonic() - started > config.budget_s
            enough = len(record.ref) - first >= 2 * stability.MIN_HALF
            if len(record.ref) < config.min_runs * (attempt + 1) and not (spent and enough):
                continue
            ref_times, cand_times = record.net()
            ratio = statistics.median(ref_times) / statistics.median(cand_times)
            if not reverified and ratio > config.reverify_above:
                reverified = True
                self._iteration(_Record(calls=self.calls), index, check=True)
            stable = median_is_stable(ref_times, config.rel_precision) and median_is_stable(
                cand_times, config.rel_precision
            )
            if stable or spent or time.monotonic() - started > config.budget_s:
                break
        return reverified

    def _net_times(self, record: _Record) -> tuple[list[float], list[float]]:
        """Each side's seconds a call, the overhead subtracted, with a note saying how."""
        extra_us = statistics.median(record.overhead) * 1e6
        if record.resolved():
            self.notes.append(
                f"subtracted from each timed request of {self.calls}: {extra_us:.0f} us "
                "(round trip and checksums, measured on the reference)"
            )
            return record.net()
        # A call shorter than the jitter of the requests around it, over their K calls,
        # cannot be told apart from that jitter: it is counted at that resolution, which
        # pulls the ratio towards 1 (a speedup understated, never overstated).
        self.notes.append(
            "a call took less than the jitter of the requests around it over their "
            f"{self.calls} calls ({record.resolution() * 1e6:.2f} us): such a call is "
            "counted at that resolution, so the speedup is understated"
        )
        return record.net(floor=record.resolution())

    def _pair_timing(
        self,
        ref_s: list[float],
        cand_s: list[float],
        config: ClockConfig,
        pressure: PressureReading | None,
        method: str,
        waits: stability.Waits | None = None,
    ) -> PairTiming:
        """The samples in milliseconds, the speedup with its interval, and its stability."""
        ref_ms, cand_ms = ([t * 1e3 for t in side] for side in (ref_s, cand_s))
        ref_sample, cand_sample = Sample.of(ref_ms), Sample.of(cand_ms)
        speedup = ref_sample.median_ms / cand_sample.median_ms if cand_sample.median_ms else 0.0
        if speedup > config.reverify_above:  # a passing early ratio is re-verified, not noted
            self.notes.append(
                f"speedup over {config.reverify_above:g}x: re-verified in full on fresh "
                "inputs during timing; worth a closer look"
            )
        interval = bootstrap_speedup_ci(ref_ms, cand_ms, config.bootstrap)
        verdict = stability.assess(
            ref_ms,
            cand_ms,
            speedup,
            interval,
            stability.stall_share(pressure, read_pressure(time.monotonic())),
            waits,
        )
        if waits is not None and max(waits.reference_share, waits.candidate_share) > 0.05:
            self.notes.append(
                f"waited for a CPU during timed requests: reference {waits.reference_share:.0%}"
                f", candidate {waits.candidate_share:.0%} (ratio without the waits: "
                f"{waits.speedup:.2f}x)"
            )
        return PairTiming(
            reference=ref_sample,
            candidate=cand_sample,
            speedup=speedup,
            speedup_ci=interval,
            method=method,
            notes=self.notes,
            suspicious=speedup > config.reverify_above,
            calls_per_request=self.calls,
            stable=verdict.stable,
            unstable_reason=verdict.reason,
        )

    # -- how many calls a request makes -------------------------------------------------------

    def _warm_up(self, batched: bool) -> None:
        """The untimed rounds: `warmup` of one call a request, from which K is estimated; then
        one round of K (the K outputs' memory allocated before any timed request), from
        which the estimate is refined when K was large enough to show a call's marginal cost."""
        single = _Record()
        for round_index in range(max(self.config.warmup, 1)):
            self._iteration(single, 0, check=False, footprint=round_index == 0, timed=False)
        if not batched:
            return
        ping = min(self._timed(self.ref, "ping")[0] for _ in range(3))
        fast, slow = sorted(  # net of each request's wait for a CPU: one warm-up request
            max(statistics.median(_unwaited(s, w)) - ping, 1e-6)  # that waited a time slice
            for s, w in ((single.ref, single.ref_wait), (single.cand, single.cand_wait))
        )  # under load read as a call of 20 ms and left K at 1
        self._set_calls(fast, slow, single)
        if self.calls < 2:
            return
        first = self.calls
        batch = _Record(calls=first)
        self._iteration(batch, 1, check=False, timed=False)
        if first >= 4:  # the marginal cost of a call, the request's fixed cost cancelled
            fast, slow = sorted(
                max((statistics.median(many) - statistics.median(one)) / (first - 1), 1e-7)
                for many, one in (
                    (_unwaited(batch.ref, batch.ref_wait), _unwaited(single.ref, single.ref_wait)),
                    (
                        _unwaited(batch.cand, batch.cand_wait),
                        _unwaited(single.cand, single.cand_wait),
                    ),
                )
            )
            self._set_calls(fast, slow, single)

    def _set_calls(self, fast_s: float, slow_s: float, single: _Record) -> None:
        """K from a call's cost on the faster and the slower side (seconds a request, per
        call), within the memory and slower-side caps; the deadlines grow with it."""
        config = self.config
        target = min(config.request_s, config.budget_s / (4 * max(config.min_runs, 1)))
        calls = min(math.ceil(target / fast_s), config.max_calls)
        slow_cap = min(config.slow_request_s, config.budget_s / (2 * max(config.min_runs, 1)))
        calls = min(calls, max(int(slow_cap / slow_s), 1))
        per_set = int(self.footprint.get("input_bytes", 0)) + int(
            self.footprint.get("output_bytes", 0)
        )
        if per_set > 0:
            room = min(config.calls_bytes, config.free_share * int(self.footprint["free_bytes"]))
            calls = min(calls, max(int(room // per_set), 1))
        self.calls = max(calls, 1)
        drawing = max(single.ref_prepare + single.cand_prepare)
        self.request_timeout_s = self.timeout_s + 20 * self.calls * max(slow_s, drawing)

    # -- one iteration ------------------------------------------------------------------------

    def _iteration(
        self,
        record: _Record,
        index: int,
        check: bool,
        footprint: bool = False,
        timed: bool = True,
    ) -> None:
        """Each side draws its K input sets right before its own timed request (neither finds
        its inputs colder in the caches), in ABBA order; then the commitments are compared,
        and calls opened: with `check`, a thorough set; else, when `timed`, at random."""
        seeds = [self._seed() for _ in range(self.calls)]
        weights = self.rng.getrandbits(62)
        scales = self.scales
        order = (self.ref, self.cand) if index % 2 == 0 else (self.cand, self.ref)
        replies: dict[str, Frame] = {}
        for peer in order:
            # An untimed call first, on the inputs of this side's last timed call: the other
            # process ran in between and took the caches and the TLB; a caller that calls
            # again finds them warm. The timed inputs are drawn after it.
            self._awake(peer, "warm", seed=self._seed())
            prepare_s, drawn = self._timed(peer, "prepare", seeds=seeds, footprint=footprint)
            self._flush(record)
            elapsed, replies[peer.label] = self._timed(
                peer, "calls", checksum=weights, scales=scales
            )
            waited = _within(self.waited, elapsed)
            # The same requests follow on both sides, so each side's next timed run finds the
            # caches as the other's does; only the reference's are used: the request less
            # its calls, after a flush as the timed one was, is what a timed request costs
            # besides them (the round trip, the checksums and, on the GPU, the context switch).
            self._flush(record)
            overhead, _ = self._timed(peer, "checksum", seed=weights, calls=True, scales=scales)
            overhead_waited = _within(self.waited, overhead)
            if peer is self.ref:  # the band is the reference's alone (the next warm call
                # restores each side's caches, so the candidate need not mirror it)
                band = self._awake(
                    peer, "checksum", seed=weights, calls=True, band=True, scales=scales
                )
                record.overhead.append(overhead)
                record.overhead_wait.append(overhead_waited)
                record.ref.append(elapsed)
                record.ref_wait.append(waited)
                record.ref_prepare.append(prepare_s / self.calls)
                record.ref_prepare_cpu.append(_prepare_cpu(self.ref, self.calls))
                replies["band"] = band
                if footprint:
                    self.footprint = dict(drawn.header)
            else:
                record.cand.append(elapsed)
                record.cand_wait.append(waited)
                record.cand_prepare.append(prepare_s / self.calls)
                record.cand_prepare_cpu.append(_prepare_cpu(self.cand, self.calls))
        problem = self.compare_checksums(
            replies[self.ref.label], replies["band"], replies[self.cand.label], "a timed run"
        )
        if problem:
            raise TimingRefused(problem, incorrect=True)
        if not (check or timed):
            return
        output_bytes = int(self.footprint.get("output_bytes", 0))
        chosen = self.openings.choose(self.calls, output_bytes, thorough=check)
        if not chosen:  # picked after every commitment is in
            return
        self.ref.resume()  # once for all the openings: a stop and a resume cost milliseconds
        self.cand.resume()
        try:
            for call in chosen:
                self._open(call, weights, replies)
        finally:
            self.ref.stop()
            self.cand.stop()

    def _open(self, call: int, key: int, replies: dict[str, Frame]) -> None:
        """Call `call` of the request just timed, fetched and checked in full (`full_check`),
        both workers awake."""
        claimed = replies[self.cand.label].header.get("checksum") or []
        bands = replies["band"].header.get("band") or []
        width = len(claimed) // max(self.calls, 1)
        opening = Opening(
            key=key,
            calls=self.calls,
            call=call,
            scales=tuple(self.scales),
            claimed=tuple(claimed[call * width : (call + 1) * width]),
            bands=tuple(bands[call * width : (call + 1) * width]),
        )
        for peer in (self.ref, self.cand):
            peer.request("select", self.request_timeout_s, index=call)
        self.full_check("a timed run", opening)

    def _timed(self, peer: Peer, op: str, **fields) -> tuple[float, Frame]:
        """A request timed from outside; `self.waited`: its wait for a CPU (worker + us)."""
        peer.resume()
        own_before = own_run_delay_s()
        try:
            with collector_held_off():
                return peer.timed(op, self.request_timeout_s, **fields)
        finally:
            own_after = own_run_delay_s()
            peer.stop()
            worker = peer.awake_wait_s
            self.waited = None
            if worker is not None and own_before is not None and own_after is not None:
                self.waited = worker + max(own_after - own_before, 0.0)

    def _awake(self, peer: Peer, op: str, **fields) -> Frame:
        peer.resume()
        try:
            return peer.request(op, self.request_timeout_s, **fields)
        finally:
            peer.stop()

    def _flush(self, record: _Record) -> None:
        """On the GPU: the parent's L2 flush (agents/verify/devflush.py), host-timed."""
        if self.device == "cuda":
            record.flushes.append(devflush.flush_ms())

    def _seed(self) -> int:
        return self.rng.randrange(1, 2**31 - 10_000)

    def _capture(self) -> str:
        seed = self._seed()
        captured = []
        for peer in (self.ref, self.cand):
            self._awake(peer, "prepare", seed=seed)
            captured.append(bool(self._awake(peer, "capture").header.get("captured")))
        if all(captured):
            return ", CUDA graph replay"
        for peer in (self.ref, self.cand):
            self._awake(peer, "uncapture")
        self.notes.append("CUDA graph capture failed; timed eager launches")
        return ""

    # -- rules over the whole run -------------------------------------------------------------

    def _prepare_excess(self, record: _Record) -> str | None:
        """Drawing inputs is the same harness work on both sides; a candidate that spends
        more there worked on its inputs before its clock started: CPU time of each worker's
        whole tree on the CPU, wall time on CUDA (agents/verify/hidden_work.py). A suspicion
        is measured again before it is refused."""
        _, cand_times = record.net()
        return hidden_work.excess(
            hidden_work.DrawingCost(tuple(record.ref_prepare), tuple(record.ref_prepare_cpu)),
            hidden_work.DrawingCost(tuple(record.cand_prepare), tuple(record.cand_prepare_cpu)),
            statistics.median(cand_times),
            self.device,
            hidden_work.HiddenWorkRule(self.config.hidden_share, 0.5, self.config.hidden_floor_s),
        )

    def _check_canary(self, record: _Record) -> None:
        """Work the candidate leaves running on the GPU after its reply delays whatever
        comes next on the device: the parent's flushes, timed from the host, wait for it.
        Measured alone before any candidate code ran, a flush is the yardstick."""
        if len(record.flushes) < 6 or not self.flush_alone_ms:
            return
        during = statistics.median(record.flushes)
        if during > 3 * self.flush_alone_ms + self.config.canary_floor_ms:
            raise TimingRefused(
                "the candidate left work running on the GPU after its calls returned: the "
                f"L2 flush between timed runs took {during:.3f} ms (median of "
                f"{len(record.flushes)}), alone {self.flush_alone_ms:.3f} ms"
            )


def _prepare_cpu(peer: Peer, calls: int) -> float | None:
    """CPU seconds per call of the worker's last `prepare` request (None where unread)."""
    cpu_s = peer.spell_cpu_s("prepare")
    return None if cpu_s is None else cpu_s / calls


def _within(waited: float | None, elapsed: float) -> float | None:
    """A request's wait for a CPU, at most its wall time (the worker's and ours overlap)."""
    return None if waited is None else min(waited, elapsed)


def _unwaited(times: list[float], waits: list[float | None]) -> list[float]:
    """Requests' wall times less their waits for a CPU (an unread wait counts as none)."""
    return [t - (w or 0.0) for t, w in zip(times, waits, strict=False)]
