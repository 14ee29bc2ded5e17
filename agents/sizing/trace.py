"""Trace a problem's forward on the meta device: shapes and dtypes flow, nothing is
allocated, so a 6.4 GB input costs nothing to measure. Runs where the problem is already
loaded (a worker, a sandboxed child), never in the parent."""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from agents.sizing.footprint import Footprint
from agents.task import LoadedProblem, SourceFile, build_model, call_factory


class EstimateFailed(Exception):
    """The trace could not run (an op without a meta kernel, a data-dependent shape, a
    factory that insists on real memory); the caller runs the problem as it is."""


class _LiveBytes(TorchDispatchMode):
    """Bytes of the tensors ops create, counted until each is freed: their peak is what the
    forward holds at once. Views and in-place results share a storage and are not counted."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """False: no dynamo guard around `__torch_dispatch__` (it compiles nothing)."""
        return False

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.written = 0

    def _free(self, count: int) -> None:
        self.live -= count

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        returns = func._schema.returns
        for index, value in enumerate(out if isinstance(out, tuple | list) else (out,)):
            if not isinstance(value, torch.Tensor):
                continue
            if index < len(returns) and returns[index].alias_info is not None:
                continue
            count = tensor_bytes(value)
            self.live += count
            self.written += count
            self.peak = max(self.peak, self.live)
            weakref.finalize(value, self._free, count)
        return out


def tensor_bytes(value: Any) -> int:
    """Bytes of every tensor in a value (lists, tuples and dicts looked into)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, list | tuple):
        return sum(tensor_bytes(item) for item in value)
    if isinstance(value, dict):
        return sum(tensor_bytes(item) for item in value.values())
    return 0


def meta_inputs(problem: LoadedProblem, source: SourceFile) -> list[Any]:
    """get_inputs() with meta as the default device: its tensors have shapes, no storage."""
    with torch.device("meta"):
        return call_factory(problem.get_inputs, source, "get_inputs")


def held_bytes(problem: LoadedProblem, source: SourceFile) -> Footprint:
    """Inputs and weights only, built on meta without running forward: a lower bound that
    costs a fraction of a second (a forward on meta imports torch._dynamo, about a second
    of CPU, since most meta kernels are Python references behind a dynamo guard)."""
    try:
        model, inputs = _build(problem, source)
    except BaseException as error:  # user code may raise anything, SystemExit included
        raise EstimateFailed(_failure(error)) from None
    held = tensor_bytes(inputs)
    return Footprint(held, _weights_bytes(model), 0, 0, 0, 0)


def trace(problem: LoadedProblem, source: SourceFile) -> Footprint:
    """The footprint of one forward at the problem's current sizes; EstimateFailed if the
    trace cannot run."""
    try:
        model, inputs = _build(problem, source)
        live = _LiveBytes()
        with torch.no_grad(), FlopCounterMode(display=False) as flops, live:
            output = model(*inputs)
        return Footprint(
            inputs_bytes=tensor_bytes(inputs),
            weights_bytes=_weights_bytes(model),
            activations_bytes=max(live.peak, tensor_bytes(output)),
            output_bytes=tensor_bytes(output),
            written_bytes=live.written,
            flops=int(flops.get_total_flops()),
        )
    except BaseException as error:  # user code may raise anything, SystemExit included
        raise EstimateFailed(_failure(error)) from None


def _build(problem: LoadedProblem, source: SourceFile) -> tuple[Any, list[Any]]:
    """Model and its inputs with meta as the default device."""
    with torch.device("meta"):
        init_inputs = call_factory(problem.get_init_inputs, source, "get_init_inputs")
        model = build_model(problem.model_class, init_inputs, source)
        inputs = call_factory(problem.get_inputs, source, "get_inputs")
    _insist_on_meta(inputs, model)
    return model, inputs


def _failure(error: BaseException) -> str:
    if isinstance(error, EstimateFailed):
        return str(error)
    message = " ".join(str(error).split())[:200] or type(error).__name__
    return f"the meta-device trace failed: {message}"


def _insist_on_meta(inputs: list[Any], model: Any) -> None:
    """A tensor made on a named device (`device="cpu"`) was really allocated: the trace
    would not describe the forward, and the worker will find out for itself."""
    tensors = [value for value in inputs if isinstance(value, torch.Tensor)]
    if isinstance(model, torch.nn.Module):
        tensors += list(model.parameters()) + list(model.buffers())
    if any(not tensor.is_meta for tensor in tensors):
        raise EstimateFailed("a tensor was made off the meta device")


def _weights_bytes(model: Any) -> int:
    if not isinstance(model, torch.nn.Module):
        return 0
    return sum(tensor_bytes(t) for t in [*model.parameters(), *model.buffers()])
