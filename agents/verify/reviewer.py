"""The correctness protocol, run inside the sandboxed child.

It follows KernelBench's current rule and closes the holes that rule leaves: fresh inputs per
trial with each call on its own clone, one candidate instance across trials (caching fails),
poisoned output memory (unwritten outputs fail), the candidate run before and after the
reference, unchanged inputs, no threads or processes left behind, untouched comparison and
timing functions, and a reload of new weights (folded-at-init candidates go stale and fail).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy
import torch

from agents.task import (
    SourceFile,
    TaskLoadError,
    apply_size,
    build_model,
    call_factory,
    describe_exception,
    load_candidate,
    load_problem,
)
from agents.verify import compare, integrity, timing
from agents.verify.verdict import ReviewFindings, Verdict

_manual_seed = torch.manual_seed
_no_grad = torch.no_grad
_deepcopy = copy.deepcopy


@dataclass
class ReviewRequest:
    """What the parent asks the child to judge."""

    reference: SourceFile
    candidate: SourceFile
    device: str = "cpu"
    size: str = "default"
    trials: int = 5
    seed: int = 42
    threads: int = 1
    reload_trials: int = 2
    measure: bool = True
    timing_budget_s: float = 5.0
    timing_min_runs: int = 10
    timing_max_runs: int = 200
    cuda_graph: bool = False


@dataclass
class ReviewReport(ReviewFindings):
    """The child's findings; the parent turns them into an EvalResult."""

    reference_failed: bool = False


class Refusal(Exception):
    """Stops the review with a verdict and a reason."""

    def __init__(self, verdict: Verdict, reason: str):
        super().__init__(reason)
        self.verdict = verdict
        self.reason = reason


def seed_everything(seed: int) -> None:
    _manual_seed(seed)
    random.seed(seed)
    numpy.random.seed(seed % (2**32))


def to_device(value: Any, device: str, dtype: torch.dtype | None = None) -> Any:
    """Move tensors (inside lists/tuples/dicts too) to a device, upcasting floats if asked."""
    if isinstance(value, torch.Tensor):
        moved = value.to(device)
        if dtype is not None and moved.is_floating_point():
            moved = moved.to(dtype)
        return moved
    if isinstance(value, list | tuple):
        return type(value)(to_device(item, device, dtype) for item in value)
    if isinstance(value, dict):
        return {key: to_device(item, device, dtype) for key, item in value.items()}
    return value


def clone_inputs(values: list[Any]) -> list[Any]:
    return [
        value.clone() if isinstance(value, torch.Tensor) else copy.deepcopy(value)
        for value in values
    ]


def inputs_equal(left: list[Any], right: list[Any]) -> bool:
    for a, b in zip(compare.flatten(left), compare.flatten(right), strict=True):
        if isinstance(a, torch.Tensor):
            if a.shape != b.shape or a.dtype != b.dtype:
                return False
            if a.is_floating_point():
                same = ((a == b) | (a.isnan() & b.isnan())).all()
            else:
                same = (a == b).all()
            if not bool(same):
                return False
        elif a != b:
            return False
    return True


def poison_memory(nbytes: list[int], device: str) -> None:
    """Fill and free blocks of the outputs' sizes, so an output the candidate never writes
    holds NaN (or fresh zero pages), never the reference's freed result."""
    blocks = [torch.full((max(n // 4, 1),), float("nan"), device=device) for n in nbytes]
    del blocks


def state_dict_compatibility(reference: torch.nn.Module, candidate: torch.nn.Module) -> bool:
    """Does the candidate accept the reference's state_dict as it is (same keys, shapes)?"""
    ref_state = reference.state_dict()
    cand_state = candidate.state_dict()
    if set(ref_state) != set(cand_state):
        return False
    return all(tuple(ref_state[key].shape) == tuple(cand_state[key].shape) for key in ref_state)


def align_parameters(reference: torch.nn.Module, candidate: torch.nn.Module) -> int:
    """Copy the reference's values into the candidate wherever names and shapes agree."""
    cand_state = candidate.state_dict()
    shared = {
        key: value
        for key, value in reference.state_dict().items()
        if key in cand_state and tuple(cand_state[key].shape) == tuple(value.shape)
    }
    if shared:
        candidate.load_state_dict(shared, strict=False)
    return len(shared)


def perturbed_state(state: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """A new random state of the same shapes; positive entries stay positive (variances)."""
    generator = torch.Generator().manual_seed(seed)
    fresh = {}
    for key, value in state.items():
        if not value.is_floating_point():
            fresh[key] = value.clone()
            continue
        cpu = value.detach().to("cpu", torch.float64)
        scale = float(cpu.abs().mean()) if cpu.numel() else 1.0
        scale = scale if scale > 0 else 1.0
        factor = 0.5 + torch.rand(cpu.shape, generator=generator, dtype=torch.float64)
        noise = 0.25 * scale * torch.randn(cpu.shape, generator=generator, dtype=torch.float64)
        new = cpu * factor + noise
        if bool((cpu > 0).all()):
            new = new.abs() + 1e-3 * scale
        fresh[key] = new.to(value.device, value.dtype)
    return fresh


class Reviewer:
    """Runs the protocol over one reference and one candidate in this process."""

    def __init__(self, request: ReviewRequest, phase: Callable[[str], None]):
        self.request = request
        self.phase = phase
        self.device = request.device
        self.report = ReviewReport(verdict=Verdict.CORRECT)
        self._comparisons: list[compare.OutputComparison] = []

    # -- building ---------------------------------------------------------------------------
    def run(self) -> ReviewReport:
        try:
            self._run()
        except Refusal as refusal:
            self.report.verdict = refusal.verdict
            self.report.reasons.append(refusal.reason)
        self._summarise()
        return self.report

    def _run(self) -> None:
        request = self.request
        torch.set_num_threads(request.threads)
        integrity.warm_thread_pools(self.device)
        integrity.install_thread_tracker()
        snapshot = integrity.take_snapshot()
        try:
            problem = load_problem(request.reference)
            apply_size(problem, request.size, request.reference)
            seed_everything(request.seed)
            init_inputs = call_factory(
                problem.get_init_inputs, request.reference, "get_init_inputs"
            )
            seed_everything(request.seed)
            reference = build_model(problem.model_class, init_inputs, request.reference)
            reference = reference.to(self.device)
            self.problem = problem
            self._out_sizes = self._warm_reference(reference)
        except TaskLoadError as error:
            self.report.reference_failed = True
            raise Refusal(Verdict.RUNTIME_ERROR, f"reference: {error}") from None
        # Threads alive before any candidate code: anything later is the candidate's doing
        # (or a helper torch starts for it, which `integrity.leftovers` tells apart).
        self._baseline_threads = integrity.native_threads()
        try:
            candidate_class = load_candidate(request.candidate)
            seed_everything(request.seed)
            candidate = build_model(candidate_class, init_inputs, request.candidate)
            candidate = self._guard(lambda: candidate.to(self.device), "moving ModelNew")
        except TaskLoadError as error:
            raise Refusal(Verdict.COMPILE_ERROR, str(error)) from None
        self._check_integrity(snapshot, "while importing and building")
        self.report.state_dict_compatible = state_dict_compatibility(reference, candidate)
        self._guard(lambda: align_parameters(reference, candidate), "aligning parameters")
        self.phase("run")

        with _no_grad():
            self._check_reference_unchanged(reference)
            self._verify(reference, candidate, snapshot)
            self._check_reference_unchanged(reference)
            self._reload_check(reference, candidate, snapshot)
            if self.report.verdict is Verdict.CORRECT and request.measure:
                self.phase("measure")  # waits for this device's measure lane
                self._measure(reference, candidate)
        self._check_integrity(snapshot, "after running")

    # -- calls ------------------------------------------------------------------------------
    def _guard(self, action: Callable[[], Any], doing: str) -> Any:
        try:
            result = action()
            if self.device == "cuda":
                torch.cuda.synchronize()
            return result
        except Refusal:
            raise
        except BaseException as error:
            raise Refusal(
                Verdict.RUNTIME_ERROR, describe_exception(error, self.request.candidate, doing)
            ) from None

    def _call_reference(self, model: torch.nn.Module, inputs: list[Any]) -> tuple[Any, list]:
        arguments = clone_inputs(inputs)
        seed_everything(self._call_seed)
        try:
            output = model(*arguments)
            if self.device == "cuda":
                torch.cuda.synchronize()
        except BaseException as error:
            raise Refusal(
                Verdict.RUNTIME_ERROR,
                "reference failed after the candidate was imported: "
                + describe_exception(error, self.request.reference, "running Model"),
            ) from None
        return output, arguments

    def _call_candidate(
        self, model: torch.nn.Module, inputs: list[Any], baseline: set[int]
    ) -> tuple[Any, list]:
        arguments = clone_inputs(inputs)
        seed_everything(self._call_seed)
        output = self._guard(lambda: model(*arguments), "running ModelNew")
        leftover = integrity.leftovers(baseline)
        if leftover.threads or leftover.processes:
            raise Refusal(Verdict.REJECTED, "; ".join(leftover.reasons()))
        return output, arguments

    def _inputs(self, seed: int) -> list[Any]:
        """Fresh inputs for a seed; every model call that follows is seeded alike, so random
        ops (dropout) draw the same numbers in the reference and the candidate."""
        self._call_seed = seed + 7919
        seed_everything(seed)
        values = call_factory(self.problem.get_inputs, self.request.reference, "get_inputs")
        return to_device(values, self.device)

    def _warm_reference(self, reference: torch.nn.Module) -> list[int]:
        """Run the reference once before any candidate code exists: a failure here is the
        reference's own, and the output sizes tell how much memory to poison."""
        inputs = self._inputs(self.request.seed)
        try:
            with _no_grad():
                seed_everything(self._call_seed)
                output = reference(*clone_inputs(inputs))
            if self.device == "cuda":
                torch.cuda.synchronize()
        except BaseException as error:
            raise TaskLoadError(
                describe_exception(error, self.request.reference, "running Model")
            ) from None
        self._warm = (inputs, output)
        return [
            leaf.numel() * leaf.element_size()
            for leaf in compare.flatten(output)
            if isinstance(leaf, torch.Tensor)
        ]

    def _check_reference_unchanged(self, reference: torch.nn.Module) -> None:
        """Rerun the reference on its first inputs: a candidate that patched torch, a module
        class or installed a mode to bend the reference is caught by the drift."""
        modes = integrity.active_modes()
        if modes:
            raise Refusal(Verdict.REJECTED, f"candidate left {' and '.join(modes)} active")
        inputs, before = self._warm
        self._call_seed = self.request.seed + 7919
        after, _ = self._call_reference(reference, inputs)
        before_leaves, after_leaves = compare.flatten(before), compare.flatten(after)
        try:
            compare.check_structure(after_leaves, before_leaves)
            same = all(
                compare.compare_output(a, b, None).strict_ok
                for a, b in zip(after_leaves, before_leaves, strict=True)
            )
        except compare.OutputMismatch:
            same = False
        if not same:
            raise Refusal(
                Verdict.REJECTED,
                "the reference's own output changed after the candidate was imported: the "
                "candidate interferes with the reference",
            )

    def _float64_copy(self, reference: torch.nn.Module) -> torch.nn.Module | None:
        try:
            return _deepcopy(reference).to(torch.float64)
        except Exception:
            return None

    def _float64_run(self, model64: torch.nn.Module | None, inputs: list[Any]) -> Any | None:
        if model64 is None:
            return None
        try:
            return model64(*to_device(clone_inputs(inputs), self.device, torch.float64))
        except Exception:
            return None  # an op without a float64 kernel: only the strict rule applies

    # -- the protocol -----------------------------------------------------------------------
    def _verify(self, reference, candidate, snapshot) -> None:
        request = self.request
        out_sizes = self._out_sizes
        baseline = self._baseline_threads
        model64 = self._float64_copy(reference)
        for trial in range(request.trials):
            self._trial(
                reference,
                candidate,
                model64,
                request.seed + 1 + trial,
                out_sizes,
                baseline,
                label=f"trial {trial + 1}",
            )
            self.report.trials = trial + 1
        self._check_integrity(snapshot, "during the trials")

    def _trial(self, reference, candidate, model64, seed, out_sizes, baseline, label) -> None:
        inputs = self._inputs(seed)
        poison_memory(out_sizes, self.device)
        first, first_args = self._call_candidate(candidate, inputs, baseline)
        expected, ref_args = self._call_reference(reference, inputs)
        poison_memory(out_sizes, self.device)
        second, second_args = self._call_candidate(candidate, inputs, baseline)
        gold = self._float64_run(model64, inputs)
        for args in (first_args, second_args):
            if not inputs_equal(args, ref_args):
                raise Refusal(
                    Verdict.REJECTED,
                    f"{label}: candidate changed its inputs (the reference leaves them as "
                    "they were)",
                )
        expected_leaves = compare.flatten(expected)
        gold_leaves = compare.flatten(gold) if gold is not None else None
        if gold_leaves is not None and len(gold_leaves) != len(expected_leaves):
            gold_leaves = None
        for when, output in (("before", first), ("after", second)):
            leaves = compare.flatten(output)
            try:
                compare.check_structure(leaves, expected_leaves)
            except compare.OutputMismatch as mismatch:
                raise Refusal(Verdict.INCORRECT, f"{label}: {mismatch}") from None
            for index, (cand, ref) in enumerate(zip(leaves, expected_leaves, strict=True)):
                ref64 = gold_leaves[index] if gold_leaves is not None else None
                result = compare.compare_output(cand, ref, ref64)
                self._comparisons.append(result)
                if not result.ok:
                    raise Refusal(
                        Verdict.INCORRECT,
                        self._mismatch_reason(label, when, index, result),
                    )

    @staticmethod
    def _mismatch_reason(label: str, when: str | None, index: int, result) -> str:
        run = f"{label}, candidate run {when} the reference" if when else label
        run += f", output {index}"
        if result.nonfinite:
            return f"{run}: NaN or Inf where the reference is finite"
        detail = f"max |diff| {result.max_abs_diff:.3g} fails allclose"
        if result.error_ratio is not None:
            detail += (
                f", and its error against float64 is {result.error_ratio:.3g}x the allowed "
                f"band ({compare.ERROR_FACTOR:g}x the fp32 reference's own error)"
            )
        return f"{run}: {detail}"

    def _summarise(self) -> None:
        results = self._comparisons
        self.report.strict_allclose = all(r.strict_ok for r in results) if results else None
        f64 = [r.float64_ok for r in results if r.float64_ok is not None]
        self.report.float64_rule = all(f64) if f64 else None
        ratios = [r.error_ratio for r in results if r.error_ratio is not None]
        self.report.float64_error_ratio = max(ratios) if ratios else None
        cand = [r.candidate_error for r in results if r.candidate_error is not None]
        ref = [r.reference_error for r in results if r.reference_error is not None]
        self.report.candidate_error = max(cand) if cand else None
        self.report.reference_error = max(ref) if ref else None

    def _reload_check(self, reference, candidate, snapshot) -> None:
        """Load one new random state into both and verify again: catches stale folding."""
        if not self.report.state_dict_compatible:
            self.report.reload_check = "skipped: ModelNew does not accept Model's state_dict"
            return
        fresh = perturbed_state(reference.state_dict(), self.request.seed + 1000)
        reference.load_state_dict(fresh)
        self._guard(lambda: candidate.load_state_dict(fresh), "loading a new state_dict")
        model64 = self._float64_copy(reference)
        baseline = self._baseline_threads
        for trial in range(self.request.reload_trials):
            try:
                self._trial(
                    reference,
                    candidate,
                    model64,
                    self.request.seed + 2000 + trial,
                    self._out_sizes,
                    baseline,
                    label=f"after reload, trial {trial + 1}",
                )
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

    def _check_integrity(self, snapshot: integrity.Snapshot, when: str) -> None:
        changed = integrity.changed_since(snapshot)
        if changed:
            shown = ", ".join(changed[:6]) + (" ..." if len(changed) > 6 else "")
            raise Refusal(Verdict.REJECTED, f"functions replaced {when}: {shown}")

    def _measure(self, reference, candidate) -> None:
        inputs = self._inputs(self.request.seed)
        ref_args = clone_inputs(inputs)
        cand_args = clone_inputs(inputs)
        reverify_seed = self.request.seed + 3000

        def run_reference():
            return reference(*ref_args)

        def run_candidate():
            return candidate(*cand_args)

        expected, _ = self._call_reference(reference, inputs)
        expected_leaves = compare.flatten(expected)
        model64 = self._float64_copy(reference)
        gold = self._float64_run(model64, inputs)
        gold_leaves = compare.flatten(gold) if gold is not None else None

        def check_output(output):
            if self.device == "cuda":
                torch.cuda.synchronize()
            leaves = compare.flatten(output)
            try:
                compare.check_structure(leaves, expected_leaves)
            except compare.OutputMismatch as mismatch:
                raise Refusal(Verdict.INCORRECT, f"during timing: {mismatch}") from None
            for index, (cand, ref) in enumerate(zip(leaves, expected_leaves, strict=True)):
                ref64 = gold_leaves[index] if gold_leaves else None
                result = compare.compare_output(cand, ref, ref64)
                if not result.ok:
                    raise Refusal(
                        Verdict.INCORRECT,
                        self._mismatch_reason("a run during timing", None, index, result),
                    )

        def reverify():
            baseline = self._baseline_threads
            self._trial(
                reference,
                candidate,
                model64,
                reverify_seed,
                self._out_sizes,
                baseline,
                label="re-verification during timing",
            )

        config = timing.TimingConfig(
            budget_s=self.request.timing_budget_s,
            min_runs=self.request.timing_min_runs,
            max_runs=self.request.timing_max_runs,
            cuda_graph=self.request.cuda_graph,
        )
        try:
            result = timing.measure_pair(
                run_reference,
                run_candidate,
                self.device,
                config,
                reverify=reverify,
                check_output=check_output,
            )
        except Refusal:
            raise
        except BaseException as error:
            raise Refusal(
                Verdict.RUNTIME_ERROR,
                describe_exception(error, self.request.candidate, "timing"),
            ) from None
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
