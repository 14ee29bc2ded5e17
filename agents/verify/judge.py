"""The correctness protocol, run by the parent over two sandboxed workers.

The reference's worker and the candidate's worker never share a process. The parent asks each
to draw inputs from the same seed and run; it receives both outputs (and the reference's
float64 anchor) as data and compares them itself, so no verdict depends on anything the
candidate can reach. The protocol keeps what the single-process reviewer checked and that
still means something: fresh inputs per trial, two candidate calls per trial on poisoned
memory (caching and unwritten outputs fail), unchanged inputs (compared by the parent on the
arguments' bytes: agents/verify/arguments.py), no processes or busy threads left behind (read
from outside), no global state changed, and a reload of new weights (folded-at-init candidates
go stale and fail). Every trial, reload trial and perturbation has its own seed from the
system's randomness, sent only with the request that uses it: no seed a worker has seen tells
it another. `JudgeRequest.seed` seeds only the init (init arguments and Model's weights), so
a user can reproduce the model. Timing is agents/verify/clock.py's.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agents.sandbox import inspect
from agents.sandbox.peer import Peer, WorkerError, WorkerFailed, WorkerGone, WorkerTimeout
from agents.sandbox.wire import Frame
from agents.task import SourceFile
from agents.verify import compare, devflush, proof, values
from agents.verify.arguments import changed_arguments
from agents.verify.clock import ClockConfig, OutsideClock, TimingRefused
from agents.verify.openings import Opening
from agents.verify.reading import SLACK_BYTES, OutputReading, Refusal, described
from agents.verify.verdict import ReviewFindings, Verdict

TRUSTED_CAP = 1 << 40
"""The reference's worker never runs candidate code: its replies are capped only by sanity."""
TIMED_FLOOR_S = 10.0
SEED_LIMIT = 2**31 - 10_000
"""A drawn seed stays below this: each side adds small offsets to it (the call seed)."""


class ReferenceBroken(Exception):
    """The reference failed on its own, before any candidate code ran: a usage error."""


@dataclass(frozen=True)
class JudgeRequest:
    reference: SourceFile
    candidate: SourceFile
    device: str = "cpu"
    size: str = "default"
    trials: int = 5
    seed: int = 42  # the init's only (Model's weights, init arguments): never a trial's
    reload_trials: int = 2
    measure: bool = True
    clock: ClockConfig = field(default_factory=ClockConfig)
    build_timeout_s: float = 120.0
    run_timeout_s: float = 60.0


@dataclass
class _Side:
    """What the parent knows of one call's results."""

    out: values.Unpacked
    args: list[dict] | None = None


class Judge(OutputReading):
    """Runs the protocol; `phase(name, step, steps, reload)` switches the parent's phase
    clock (agents/verify/phases.py), `acquire`/`release` hold the device's measure lane
    around the timing."""

    def __init__(
        self,
        request: JudgeRequest,
        reference: Peer,
        candidate: Peer,
        phase: Callable[..., None],
        acquire: Callable[[], bool],
        release: Callable[[], None],
    ) -> None:
        self.request = request
        self.ref = reference
        self.cand = candidate
        self._switch = phase
        self._current: tuple = ("start",)
        self.acquire = acquire
        self.release = release
        self.report = ReviewFindings(verdict=Verdict.CORRECT)
        self.comparisons: list[compare.OutputComparison] = []
        self.anchored = False  # the first trial fetches the float64 anchor for the report
        self.rng = random.SystemRandom()  # no state a worker could learn from what it sees
        self.flush_alone_ms: float | None = None
        self.slowest_call_s = 0.0  # the candidate's slowest verified call, with its overheads
        self.args_sample: int | None = None  # this trial's sample of large arguments
        self.leaf_specs: list[values.TensorSpec | None] = []  # the reference's output leaves
        self.forward = False  # an opening: the candidate's parts go on to the reference too

    # -- entry --------------------------------------------------------------------------------

    def run(self) -> ReviewFindings:
        """The verdict; raises ReferenceBroken when the reference fails before the
        candidate has run any code of its own."""
        try:
            self._protocol()
        except Refusal as refusal:
            self.report.verdict = refusal.verdict
            self.report.reasons.append(refusal.reason)
        self._summarise()
        return self.report

    def _protocol(self) -> None:
        request = self.request
        self._load_reference()
        self.phase("build")
        self._build_candidate()
        self.worker = self._candidate_worker()
        self.baseline = inspect.baseline(self.cand.process.pid, self.worker)
        self.affinity = inspect.affinity(self.worker)
        for trial in range(request.trials):
            self.phase("run", trial + 1, request.trials)
            self._trial(self._fresh_seed(), f"trial {trial + 1}")
            self.report.trials = trial + 1
        self._reload_check()
        self._check_state("after the trials")
        if self.report.verdict is Verdict.CORRECT and request.measure:
            self._measure()
            self._check_state("after timing")

    def phase(self, *phase: Any) -> None:
        """Enter a phase (a name, then optionally step, steps, reload)."""
        self._current = phase
        self._switch(*phase)

    @contextlib.contextmanager
    def _within(self, name: str) -> Iterator[None]:
        """Phase `name` for a moment, then back to the phase it interrupted."""
        before = self._current
        self.phase(name, *before[1:])
        try:
            yield
        finally:
            self.phase(*before)

    # -- building -----------------------------------------------------------------------------

    def _load_reference(self) -> None:
        """Model built and run once, before any candidate code runs: a failure here is the
        reference's own. Its answer (init arguments and state dict, as data) goes on to the
        candidate's worker untouched."""
        request = self.request
        fields = {
            "reference": {"text": request.reference.text, "path": request.reference.path},
            "size": request.size,
            "seed": request.seed,
        }
        try:
            frame = self.ref.request(
                "load", request.build_timeout_s, payload_cap=TRUSTED_CAP, **fields
            )
            if request.device == "cuda":  # before any candidate code has run
                self.flush_alone_ms = min(devflush.flush_ms() for _ in range(5))
        except WorkerFailed as error:
            raise ReferenceBroken(error.message) from None
        except WorkerError as error:
            raise ReferenceBroken(f"reference: {error}") from None
        self.ops = frame.header.get("ops") or []
        self.poison_bytes = frame.header.get("poison_bytes") or []
        self.shared_frame = frame

    def _build_candidate(self) -> None:
        request = self.request
        frame = self.shared_frame
        reply = self._cand(
            "build",
            request.build_timeout_s,
            doing="building",
            payload=frame.payload,
            tree=frame.header.get("tree"),
            specs=frame.header.get("specs"),
            reference={"text": request.reference.text, "path": request.reference.path},
            candidate={"text": request.candidate.text, "path": request.candidate.path},
            size=request.size,
            seed=request.seed,
            ops=self.ops,
            poison_bytes=self.poison_bytes,
        )
        self.report.state_dict_compatible = bool(reply.header.get("state_dict_compatible"))
        self._refuse_changes(reply, "while importing and building")

    def _candidate_worker(self) -> int:
        """The host pid of the candidate's worker process (inside the jail it has another)."""
        root = self.cand.process.pid
        if self.cand.own_pid is None:
            return root
        return inspect.find_worker(root, self.cand.own_pid) or root

    # -- requests -----------------------------------------------------------------------------

    def _cand(self, op: str, timeout_s: float, doing: str = "running", **fields: Any) -> Frame:
        """A request to the candidate; every way it can fail becomes a Refusal."""
        try:
            return self.cand.request(op, timeout_s, **fields)
        except WorkerError as error:
            raise self._refusal(error, doing, op) from None

    def _refusal(self, error: WorkerError, doing: str, op: str = "") -> Refusal:
        """The verdict for a request that failed: whose fault, and what kind of failure."""
        if error.worker == self.ref.label:
            return Refusal(
                Verdict.RUNTIME_ERROR,
                f"the reference failed while this candidate was running ({error}); "
                "if it fails alone too, fix the reference",
            )
        if isinstance(error, WorkerFailed):
            if error.kind == "build":
                return Refusal(Verdict.COMPILE_ERROR, error.message)
            if error.kind == "harness" and op in ("fetch", "part"):
                return Refusal(Verdict.INCORRECT, f"its output cannot be compared: {error}")
            return Refusal(Verdict.RUNTIME_ERROR, error.message)
        if isinstance(error, WorkerTimeout):
            return Refusal(Verdict.TIMEOUT, f"{doing} took longer than {error.seconds:g} s")
        assert isinstance(error, WorkerGone)
        if error.alive:  # it broke the protocol: a forged, early or oversized answer
            return Refusal(Verdict.REJECTED, f"while {doing}: {error.why}")
        reason = f"the candidate's process {error.why.split(' ', 3)[-1]} during {doing}"
        last = _last_line(self.cand.stderr.text())
        return Refusal(
            Verdict.RUNTIME_ERROR, reason + (f"; last line on stderr: {last}" if last else "")
        )

    def _ref(self, op: str, **fields: Any) -> Frame:
        """A request to the reference after the candidate started: if it fails now, the
        candidate may be the cause (it shares the device), so the candidate is refused."""
        timeout = max(self.request.run_timeout_s, self.request.build_timeout_s)
        try:
            return self.ref.request(op, timeout, payload_cap=TRUSTED_CAP, **fields)
        except WorkerError as error:
            raise self._refusal(error, "running the reference", op) from None

    # -- trials -------------------------------------------------------------------------------

    def _fresh_seed(self) -> int:
        return self.rng.randrange(1, SEED_LIMIT)

    def _trial(self, seed: int, label: str) -> None:
        self._ref("prepare", seed=seed)
        self._ref("run", clone=True)
        # Large arguments are compared at a sample drawn now and sent to the candidate only
        # with the fetch that follows its call (serve.py, `sampled_arguments`).
        self.args_sample = self.rng.randrange(2**62)
        reference = self._fetch_reference(args=True)
        gold = self._gold(eager=not self.anchored, sample_seed=self.rng.randrange(2**62))
        self.anchored = True
        self._cand("prepare", self.request.run_timeout_s, seed=seed)
        # Two calls on the same inputs, the first output held across the second (as a
        # caller would hold it): caching, first-call behaviour and outputs that alias memory
        # the next call overwrites all show up. The second call's arguments come back with its
        # output, as bytes the parent compares; the first call's too, half the time, decided
        # after it returned: an in-place kernel writes on every call, and one that writes only
        # while unwatched cannot know beforehand which calls are.
        last: values.Unpacked | None = None
        for call in range(2):
            began = time.monotonic()
            reply = self._cand(
                "run", self.request.run_timeout_s, clone=True, poison=True, check=True
            )
            self.slowest_call_s = max(self.slowest_call_s, time.monotonic() - began)
            self._refuse_changes(reply, f"{label}, during a call")
            self._refuse_leftovers(threads_too=call == 1)
            if call == 1 or self.rng.random() < 0.5:
                last = self._fetch_candidate(args=True)
                changed = changed_arguments(last, reference)
                if changed:
                    raise Refusal(
                        Verdict.REJECTED, f"{label}, candidate call {call + 1}: {changed}"
                    )
        before = self._fetch_candidate(previous=True)
        assert last is not None
        with self._within("compare"):
            self._compare(label, {"before": before, "after": last}, reference, gold)

    # -- reload, state, leftovers -----------------------------------------------------------------

    def _reload_check(self) -> None:
        """Load one new random state into both and verify again: catches stale folding."""
        if not self.report.state_dict_compatible and not self._accepts_state_dict():
            self.report.reload_check = (
                "skipped: ModelNew refused Model's state_dict, so weights folded at __init__ "
                "went unchecked (--require-state-dict refuses such a candidate)"
            )
            return
        frame = self._ref("perturb", seed=self._fresh_seed())
        self._cand(
            "load_state",
            self.request.run_timeout_s,
            doing="loading a new state_dict",
            payload=frame.payload,
            tree=frame.header.get("tree"),
            specs=frame.header.get("specs"),
        )
        for trial in range(self.request.reload_trials):
            self.phase("run", trial + 1, self.request.reload_trials, True)
            try:
                self._trial(self._fresh_seed(), f"after reload, trial {trial + 1}")
            except Refusal as refusal:
                if refusal.verdict is Verdict.INCORRECT:
                    self.report.reload_check = "failed"
                    raise Refusal(
                        Verdict.INCORRECT,
                        refusal.reason + " (ModelNew went stale after load_state_dict: "
                        "weights folded at __init__ must be recomputed from the parameters)",
                    ) from None
                raise
        self.report.reload_check = "passed"

    def _accepts_state_dict(self) -> bool:
        """The candidate's worker said ModelNew's state_dict differs from Model's (a claim that
        would skip the reload check): the parent tries it. Model's own state, which ModelNew
        already holds wherever names and shapes agree, is loaded: a refusal changes nothing,
        an acceptance (a load hook that maps Model's names) makes the reload check run."""
        state = values.unpack(
            self.shared_frame.header.get("tree"),
            self.shared_frame.header.get("specs"),
            self.shared_frame.payload,
        ).value["state"]
        tree, specs, payload = values.pack(state)
        try:
            self.cand.request(
                "load_state", self.request.run_timeout_s, payload=payload, tree=tree, specs=specs
            )
        except WorkerFailed as error:
            if error.worker != self.ref.label and error.kind == "runtime":
                return False
            raise self._refusal(error, "loading Model's state_dict", "load_state") from None
        except WorkerError as error:
            raise self._refusal(error, "loading Model's state_dict", "load_state") from None
        self.report.state_dict_compatible = True
        return True

    def _check_state(self, when: str) -> None:
        reply = self._cand("changes", self.request.run_timeout_s)
        self._refuse_changes(reply, when)
        self._refuse_leftovers()

    def _refuse_changes(self, reply: Frame, when: str) -> None:
        changed = [str(item)[:200] for item in reply.header.get("changed") or []][:8]
        if changed:
            raise Refusal(Verdict.REJECTED, f"global state changed {when}: {'; '.join(changed)}")

    def _refuse_leftovers(self, threads_too: bool = True) -> None:
        found = inspect.leftover_work(
            self.cand.process.pid, self.worker, self.baseline, threads_too
        )
        now = inspect.affinity(self.worker)
        if self.affinity is not None and now is not None and now != self.affinity:
            found.append(f"candidate changed its CPU affinity from {self.affinity} to {now}")
        if found:
            raise Refusal(Verdict.REJECTED, "; ".join(found))

    # -- timing ------------------------------------------------------------------------------------

    def _measure(self) -> None:
        self.phase("lane_wait")
        if not self.acquire():
            raise Refusal(Verdict.RUNTIME_ERROR, "cancelled while waiting for the device")
        try:
            self.phase("measure")
            clock = OutsideClock(
                self.ref,
                self.cand,
                self.request.device,
                self.request.clock,
                self._timed_deadline(),
                full_check=self._full_check,
                compare_checksums=proof.checksum_mismatch,
                flush_alone_ms=self.flush_alone_ms,
            )
            try:
                result = clock.measure()
            except TimingRefused as refused:
                verdict = Verdict.INCORRECT if refused.incorrect else Verdict.REJECTED
                raise Refusal(verdict, refused.reason) from None
            except WorkerError as error:
                raise self._refusal(error, "a timed run") from None
        finally:
            self.cand.resume()
            self.release()
        report = self.report
        report.reference_ms = result.reference.median_ms
        report.candidate_ms = result.candidate.median_ms
        report.reference_iqr_ms = result.reference.iqr_ms
        report.candidate_iqr_ms = result.candidate.iqr_ms
        report.speedup = result.speedup
        report.speedup_ci = list(result.speedup_ci)
        report.timing_runs = result.runs
        report.timing_method = result.method
        report.timing_notes = result.notes
        report.suspicious = result.suspicious
        report.timing_stable, report.timing_unstable_reason = result.stable, result.unstable_reason

    def _timed_deadline(self) -> float:
        """A timed call may take many times its slowest verified call, within the run limit:
        a candidate that hangs once timing starts releases the device in seconds."""
        return min(self.request.run_timeout_s, max(TIMED_FLOOR_S, 20 * self.slowest_call_s))

    def _full_check(self, label: str, opening: Opening | None = None) -> None:
        """An opened call: its output compared in full as a trial's is, then the commitment
        the candidate claimed for it recomputed from those bytes by the reference's process
        (agents/verify/proof.py), which receives them part by part as they are compared: a
        claim that is not its output's is a forged reply. The call's arguments come back
        with it (at a sample drawn now, when large) and must be the reference's: a kernel
        that writes its inputs only once timing starts shows here."""
        self.args_sample = self.rng.randrange(2**62)
        reference = self._fetch_reference(args=True)
        frame = self._cand(
            "fetch",
            self.request.run_timeout_s,
            payload_cap=self.expected_bytes + SLACK_BYTES,
            args=True,
            args_sample=self.args_sample,
            bare=True,
        )
        header = frame.header

        def begin() -> None:  # room for the output in the reference's worker, not here
            tree, specs = header.get("out_tree"), header.get("out_specs")
            self._ref("take", begin=True, tree=tree, specs=specs)
            self.forward = True

        try:
            output = described(frame)
            with self._within("compare"):
                self._compare(
                    label,
                    {None: output},
                    reference,
                    self._gold(eager=False),
                    begin if opening is not None else None,
                )
        except values.ValueRefused as error:
            raise TimingRefused(f"its output cannot be read: {error}", incorrect=True) from None
        except Refusal as refusal:
            raise TimingRefused(refusal.reason, incorrect=True) from None
        finally:
            self.forward = False
        changed = changed_arguments(output, reference)
        if changed:
            raise TimingRefused(f"{label}: {changed}")
        if opening is None:
            return
        recomputed = self._ref(
            "recommit",
            taken=True,
            seed=opening.key,
            calls=opening.calls,
            call=opening.call,
            scales=list(opening.scales),
        ).header.get("checksum")
        problem = proof.claim_mismatch(opening, recomputed, label)
        if problem:
            raise TimingRefused(problem)

    # -- summary -----------------------------------------------------------------------------------

    def _summarise(self) -> None:
        results = self.comparisons
        report = self.report
        report.strict_allclose = all(r.strict_ok for r in results) if results else None
        f64 = [r.float64_ok for r in results if r.float64_ok is not None]
        report.float64_rule = all(f64) if f64 else None
        ratios = [r.error_ratio for r in results if r.error_ratio is not None]
        report.float64_error_ratio = max(ratios) if ratios else None
        cand = [r.candidate_error for r in results if r.candidate_error is not None]
        ref = [r.reference_error for r in results if r.reference_error is not None]
        report.candidate_error = max(cand) if cand else None
        report.reference_error = max(ref) if ref else None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
