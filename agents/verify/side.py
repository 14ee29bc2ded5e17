"""One side of an evaluation, inside its own sandboxed process: the reference or the candidate.

Why two processes: a candidate that shares an address space with the reference, the expected
values, the judge or the timer can reach all of them. Here the reference's process never
imports candidate code, and the candidate's process never holds an expected value: each side
only builds its model, draws inputs from a seed the parent sends, runs, and hands its outputs
back as data. The parent compares and times (agents/verify/judge.py, clock.py).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

import numpy
import torch
from torch.utils._python_dispatch import TorchDispatchMode

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
from agents.verify import state as global_state
from agents.verify import values
from agents.verify.compare import STRICT_TOLERANCE


class SideError(Exception):
    """A request failed; `kind` tells the parent whose fault it is."""

    def __init__(self, message: str, kind: str = "runtime") -> None:
        super().__init__(message)
        self.kind = kind  # "load" | "build" | "runtime" | "protocol"


def seed_everything(seed: int) -> None:
    """Python's, numpy's and torch's generators (CPU and, once started, CUDA) from one seed.
    Not torch.manual_seed: it also visits every other backend's generator and costs ~65 us,
    which a small kernel's timing loop pays twice per iteration."""
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed(seed)
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


def clone_inputs(items: list[Any]) -> list[Any]:
    return [
        item.clone() if isinstance(item, torch.Tensor) else copy.deepcopy(item) for item in items
    ]


def flatten(output: Any) -> list[Any]:
    """Tensors and scalars of a (nested) tuple/list/dict output, in a stable order."""
    if isinstance(output, list | tuple):
        return [leaf for item in output for leaf in flatten(item)]
    if isinstance(output, dict):
        return [leaf for key in sorted(output, key=str) for leaf in flatten(output[key])]
    return [output]


class _OpRecorder(TorchDispatchMode):
    """The aten operators a forward calls: the candidate's dispatch tables of these are
    watched for overrides."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """False: torch would otherwise wrap `__torch_dispatch__` in a dynamo guard whose
        first call imports torch._dynamo (about a second), and a recorder compiles nothing."""
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(func._schema.name)
        return func(*args, **(kwargs or {}))


class Side:
    """The model of one side and what it last prepared, ran and returned."""

    def __init__(self, role: str, device: str, threads: int) -> None:
        self.role = role
        self.device = device
        torch.set_num_threads(threads)
        torch.set_grad_enabled(False)  # as KernelBench evaluates; a change is refused
        _warm_thread_pools(device)
        self.forget()

    def forget(self) -> None:
        """Drop everything of the last evaluation: a warm reference's worker serves the next
        candidate from the same start as a fresh one (agents/verify/keeper.py)."""
        torch.set_grad_enabled(False)
        self.source: SourceFile | None = None
        self.reference: SourceFile | None = None
        self.problem = None
        self.model: Any = None
        self.model64: Any = None
        self.inputs: list[Any] = []
        self.args: list[Any] = []
        self.output: Any = None
        self.previous: Any = None  # the output before the last call, still held
        self.call_seed = 0
        self.poison_bytes: list[int] = []
        self.pristine: dict[str, Any] | None = None
        self.ops: list[str] = []
        self.graph: Any = None

    # -- building -----------------------------------------------------------------------------

    def load_reference(self, request: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """Build Model, run it once (a failure here is the reference's own) and answer with
        what the candidate needs: init arguments, the state dict, output sizes, operators."""
        self.forget()
        self.reference = self.source = SourceFile(**request["reference"])
        init_inputs = self._load_problem(request, self.reference)
        seed_everything(int(request["seed"]))
        model = build_model(self.problem.model_class, init_inputs, self.reference)
        self.model = self._guard(lambda: model.to(self.device), "moving Model", "load")
        self.prepare(int(request["seed"]))
        recorder = _OpRecorder()
        try:
            with recorder:
                self.run(clone=True, poison=False)
        except SideError:
            recorder.ops.clear()  # an op the recording mode cannot pass through: run plainly
            try:
                self.run(clone=True, poison=False)
            except SideError as error:
                raise SideError(str(error), "load") from None
        self.ops = sorted(recorder.ops)
        leaves = [leaf for leaf in flatten(self.output) if isinstance(leaf, torch.Tensor)]
        answer = {
            "ops": self.ops,
            "poison_bytes": [leaf.numel() * leaf.element_size() for leaf in leaves],
            "state_keys": _state_keys(self.model),
        }
        return answer, {"init": init_inputs, "state": _state(self.model)}

    def build_candidate(self, request: dict[str, Any], shared: Any) -> dict[str, Any]:
        """Build ModelNew with the reference's init arguments and the reference's values
        wherever names and shapes agree; record the state every later call must keep."""
        self.reference = SourceFile(**request["reference"])
        self.source = SourceFile(**request["candidate"])
        self._load_problem(request, self.reference)
        self.ops = list(request.get("ops") or [])
        self.poison_bytes = [int(n) for n in request.get("poison_bytes") or []]
        self.pristine = global_state.snapshot(self.ops)
        try:
            candidate_class = load_candidate(self.source)
            seed_everything(int(request["seed"]))
            model = build_model(candidate_class, list(shared["init"]), self.source)
        except TaskLoadError as error:
            raise SideError(str(error), "build") from None
        self.model = self._guard(lambda: model.to(self.device), "moving ModelNew", "runtime")
        reference_state = shared["state"]
        own = _state_keys(self.model)
        compatible = own == {k: list(v.shape) for k, v in reference_state.items()}
        shared_values = {
            key: value.to(self.device)
            for key, value in reference_state.items()
            if key in own and own[key] == list(value.shape)
        }
        if shared_values:
            self._guard(
                lambda: self.model.load_state_dict(shared_values, strict=False),
                "aligning parameters with Model's",
                "runtime",
            )
        return {"state_dict_compatible": compatible, "changed": self._changes()}

    def _load_problem(self, request: dict[str, Any], reference: SourceFile) -> list[Any]:
        try:
            self.problem = load_problem(reference)
            apply_size(self.problem, request.get("size", "default"), reference)
            seed_everything(int(request["seed"]))
            return call_factory(self.problem.get_init_inputs, reference, "get_init_inputs")
        except TaskLoadError as error:
            raise SideError(f"reference: {error}", "load") from None

    # -- the calls ----------------------------------------------------------------------------

    def prepare(self, seed: int) -> None:
        """Fresh inputs for a seed, drawn where they are used (a CUDA device context makes
        torch.randn and friends allocate there); every call that follows is seeded alike, so
        random ops (dropout) draw the same numbers on both sides."""
        self.call_seed = seed + 7919
        self.output = self.previous = None  # freed before the next call, as a caller would
        seed_everything(seed)
        if self.device == "cuda":
            try:
                with torch.device("cuda"):
                    drawn = call_factory(self.problem.get_inputs, self.reference, "get_inputs")
            except TaskLoadError:
                seed_everything(seed)
                drawn = call_factory(self.problem.get_inputs, self.reference, "get_inputs")
        else:
            drawn = call_factory(self.problem.get_inputs, self.reference, "get_inputs")
        self.inputs = to_device(drawn, self.device)
        if self.graph is not None:
            self.graph.load(self.inputs)
        seed_everything(self.call_seed)  # here, so a timed call does not pay for seeding

    def run(self, clone: bool, poison: bool) -> None:
        """One call of the model on the prepared inputs, finished on the device. A timed call
        (clone=False) does nothing else here: inputs and seeding happen in `prepare`, and the
        checksum that proves the output complete follows in the same request (serve.py)."""
        if self.graph is not None:
            self.output = self._guard(self.graph.replay, self._doing(), "runtime")
            self.args = self.graph.inputs
            return
        self.previous = self.output
        args = self.inputs
        if clone:  # a repeated call on the same inputs: same inputs, same random numbers
            args = clone_inputs(self.inputs)
            if poison:
                _poison_memory(self.poison_bytes, self.device)
            seed_everything(self.call_seed)
        self.output = self._guard(lambda: self.model(*args), self._doing(), "runtime")
        self.args = args

    def anchor(self) -> Any:
        """The reference in float64 on the same inputs: the band's yardstick. None when an op
        has no float64 kernel (only the strict rule applies then)."""
        try:
            if self.model64 is None:
                self.model64 = copy.deepcopy(self.model).to(torch.float64)
            seed_everything(self.call_seed)
            gold = self.model64(*to_device(clone_inputs(self.inputs), self.device, torch.float64))
            if self.device == "cuda":
                torch.cuda.synchronize()
            return gold
        except Exception:
            return None

    def perturb(self, seed: int) -> dict[str, torch.Tensor]:
        fresh = perturbed_state(self.model.state_dict(), seed)
        self.model.load_state_dict(fresh)
        self.model64 = None
        return fresh

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        moved = {key: value.to(self.device) for key, value in state.items()}
        self._guard(lambda: self.model.load_state_dict(moved), "loading a new state_dict")

    def capture(self) -> bool:
        """Replay calls through a CUDA graph (launch-bound kernels); False when the model
        cannot be captured."""
        try:
            self.graph = _Graph(self.model, self.inputs, self.call_seed)
            return True
        except Exception:
            self.graph = None
            return False

    def changes(self) -> list[str]:
        return self._changes()

    def settle(self) -> None:
        """Wait for everything this process queued on the device, side streams included."""
        if self.device == "cuda":
            torch.cuda.synchronize()

    def _changes(self) -> list[str]:
        if self.pristine is None:
            return []
        return global_state.changes(self.pristine, global_state.snapshot(self.ops))

    def _doing(self) -> str:
        return "running Model" if self.role == "reference" else "running ModelNew"

    def _guard(self, action: Callable[[], Any], doing: str, kind: str = "runtime") -> Any:
        try:
            result = action()
            if self.device == "cuda":
                torch.cuda.synchronize()
            return result
        except SideError:
            raise
        except BaseException as error:  # candidate code raises anything, SystemExit too
            source = self.source or self.reference
            raise SideError(describe_exception(error, source, doing), kind) from None


class _Graph:
    """A CUDA graph of one call with static input buffers that `load` refills."""

    def __init__(self, model: Any, inputs: list[Any], call_seed: int) -> None:
        self.inputs = clone_inputs(inputs)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                seed_everything(call_seed)
                model(*self.inputs)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.output = model(*self.inputs)

    def load(self, inputs: list[Any]) -> None:
        for static, fresh in zip(self.inputs, inputs, strict=True):
            if isinstance(static, torch.Tensor):
                static.copy_(fresh)

    def replay(self) -> Any:
        self.graph.replay()
        return self.output


def _state(model: Any) -> dict[str, torch.Tensor]:
    return {key: value.detach() for key, value in model.state_dict().items()}


def _state_keys(model: Any) -> dict[str, list[int]]:
    try:
        return {key: list(value.shape) for key, value in model.state_dict().items()}
    except Exception:
        return {}


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


def _poison_memory(nbytes: list[int], device: str) -> None:
    """Fill and free blocks of the outputs' sizes, so an output the candidate never writes
    holds NaN (or fresh zero pages), never a previous call's result."""
    blocks = [torch.full((max(n // 4, 1),), float("nan"), device=device) for n in nbytes]
    del blocks


def _warm_thread_pools(device: str) -> None:
    """Start torch's intra-op pool now, so its threads are part of the baseline the parent
    reads from outside before any user code runs."""
    a = torch.randn(256, 256)
    for _ in range(3):
        (a @ a).sum().item()
        torch.nn.functional.softmax(a, dim=-1).sum().item()
    if device == "cuda":
        b = a.cuda()
        (b @ b).sum().item()
        torch.cuda.synchronize()


CHECKSUM_WIDTH = 4096


def _flat_real(leaf: torch.Tensor) -> torch.Tensor:
    flat = leaf.detach().reshape(-1)
    return torch.view_as_real(flat).reshape(-1) if flat.is_complex() else flat


def checksum(value: Any, seed: int) -> list[Any]:
    """Per leaf, one number that needs the whole output: a weighted sum whose weights are
    drawn from `seed`, which the worker learns only with the request that makes it compute.
    The weights are an outer product (one random vector along rows of CHECKSUM_WIDTH, one
    across them), so the sum costs one read of the output. Integers and booleans are summed
    exactly; a scalar leaf is sent as it is."""
    sums: list[Any] = []
    for index, leaf in enumerate(flatten(value)):
        if not isinstance(leaf, torch.Tensor):
            sums.append({"scalar": values.pack(leaf)[0]})
            continue
        if type(leaf) is not torch.Tensor and type(leaf) is not torch.nn.Parameter:
            sums.append({"kind": "subclass"})
            continue
        if leaf.is_meta or leaf.layout != torch.strided:
            sums.append({"kind": "not strided"})
            continue
        flat = _flat_real(leaf)
        leaf_seed = seed + 7919 * index
        entry: dict[str, Any] = {"kind": "tensor", "numel": flat.numel(), "dtype": str(leaf.dtype)}
        if flat.is_floating_point():
            entry["sum"] = float(_weighted_float(flat, leaf_seed, square=False))
        else:
            entry["sum"] = int(_weighted_int(flat, leaf_seed))
        sums.append(entry)
    return sums


def _weighted_float(flat: torch.Tensor, seed: int, square: bool) -> torch.Tensor:
    """sum_ij v_i w_j x_ij over the output viewed as rows of CHECKSUM_WIDTH (plus a tail
    weighted by t); with `square`, the same with v^2, w^2 and t^2 (for the band). One
    generator draws w, then v, then t, so both sides draw the same numbers."""
    width = CHECKSUM_WIDTH
    rows = flat.numel() // width
    work = torch.float64 if flat.dtype == torch.float64 else torch.float32
    generator = torch.Generator(device=flat.device).manual_seed(seed)
    w = torch.randn(width if rows else 0, generator=generator, device=flat.device, dtype=work)
    v = torch.randn(rows, generator=generator, device=flat.device, dtype=torch.float64)
    tail = flat[rows * width :].to(torch.float64)
    t = torch.randn(tail.numel(), generator=generator, device=flat.device, dtype=torch.float64)
    if square:
        w, v, t = w * w, v * v, t * t
    total = torch.dot(tail, t)
    if rows:
        partial = flat[: rows * width].view(rows, width).to(work) @ w
        total = total + torch.dot(partial.to(torch.float64), v)
    return total


def _weighted_int(flat: torch.Tensor, seed: int) -> torch.Tensor:
    generator = torch.Generator(device=flat.device).manual_seed(seed)
    weights = torch.randint(-1000, 1000, (flat.numel(),), generator=generator, device=flat.device)
    return (flat.to(torch.int64) * weights).sum()


def checksum_band(value: Any, seed: int) -> list[float | None]:
    """Per leaf (the reference's side): the standard deviation of checksum(candidate) -
    checksum(reference) when every element differs by allclose's full allowance
    tol * (1 + |ref|) with a random sign: the yardstick for a timed output's checksum."""
    bands: list[float | None] = []
    for index, leaf in enumerate(flatten(value)):
        if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex()):
            tolerance = STRICT_TOLERANCE.get(leaf.dtype, 1e-4)
            flat = _flat_real(leaf).to(torch.float64)
            allowance = torch.nan_to_num(flat, nan=0.0, posinf=0.0, neginf=0.0)
            allowance = allowance.abs_().mul_(tolerance).add_(tolerance).square_()
            variance = _weighted_float(allowance, seed + 7919 * index, square=True)
            bands.append(float(variance.clamp_min(0.0).sqrt()))
        else:
            bands.append(None)
    return bands
