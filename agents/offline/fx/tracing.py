"""Trace a Program into an fx graph with every node's shape and dtype, refusing forwards fx
would silently freeze (branches on `self.training`, tensors computed outside traced ops).

Float attributes the forward reads (`self.scale`) can stay symbolic (`symbolic_scalars`), so
one rewrite serves every constructor argument; `apply_general_first` tries that first."""

from __future__ import annotations

import contextlib
import contextvars
import copy
import io
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch.fx.passes.shape_prop import ShapeProp

from agents.offline.passes.base import PassError, Program, Rewrite, RewritePass


class TraceError(PassError):
    """fx cannot trace (or shape-propagate) this forward; the message is one line."""


# -- tracing ---------------------------------------------------------------------------------


def trace(program: Program) -> torch.fx.GraphModule:
    """Symbolically trace a copy of the module and record every node's shape and dtype.

    The copy is traced in train and eval mode: a forward that branches on `self.training` is
    refused, since fx would freeze one branch (the reviewer runs the default train mode)."""
    try:
        module = copy.deepcopy(program.module)
    except Exception as error:  # a module that cannot be copied cannot be traced safely
        raise TraceError(f"cannot copy the module: {_one_line(error)}") from None
    forward = getattr(type(module), "forward", None)
    filename = getattr(getattr(forward, "__code__", None), "co_filename", None)
    training = module.training
    try:
        module.train()
        gm = _symbolic_trace(module)
        module.eval()
        eval_code = _symbolic_trace(module).code
    except Exception as error:
        raise TraceError(f"fx cannot trace forward: {_located(error, filename, program)}") from None
    finally:
        module.train(training)
    for node in gm.graph.nodes:
        if node.op == "get_attr" and not _has_path(module, str(node.target)):
            raise TraceError(
                "forward computes a tensor outside traced ops (e.g. from a buffer), which fx "
                "would freeze into a constant"
            )
    if gm.code != eval_code:
        raise TraceError("forward depends on self.training, which fx would freeze to one branch")
    gm.train(training)
    propagate(gm, program.inputs)
    return gm


# -- float attributes as named values ---------------------------------------------------------


class SelfScalar:
    """A call_function target standing for a float attribute the forward reads
    (`self.scaling_factor`): generated code reads the attribute at call time, so one rewrite
    serves every constructor argument. Calling it returns the traced value, so shapes still
    propagate. A rule that needs the value itself (x * 1 is x) must not look through it."""

    def __init__(self, name: str, value: float):
        self.name = name
        self.value = value
        self.__name__ = name

    def __call__(self) -> float:
        return self.value


def self_scalar(value: Any) -> SelfScalar | None:
    """The SelfScalar a node stands for, else None."""
    if isinstance(value, torch.fx.Node) and isinstance(value.target, SelfScalar):
        return value.target
    return None


@dataclass
class ScalarMode:
    """What one `symbolic_scalars()` block traced: the float attributes that became nodes."""

    traced: list[str] = field(default_factory=list)


_SYMBOLIC: contextvars.ContextVar[ScalarMode | None] = contextvars.ContextVar(
    "kernel_agent_symbolic_scalars", default=None
)


@contextlib.contextmanager
def symbolic_scalars() -> Iterator[ScalarMode]:
    """Inside, `trace` keeps the module's float attributes as `self.<name>` nodes instead of
    freezing their values into the graph."""
    mode = ScalarMode()
    token = _SYMBOLIC.set(mode)
    try:
        yield mode
    finally:
        _SYMBOLIC.reset(token)


class _ScalarTracer(torch.fx.Tracer):
    """fx's tracer, with the root's float attributes replaced by proxies of SelfScalar nodes
    while forward runs (fx itself only sees attribute reads that reach Module.__getattr__)."""

    def __init__(self, scalars: dict[str, float]):
        super().__init__()
        self._scalars = scalars

    def create_args_for_root(self, root_fn, is_module, concrete_args=None):
        result = super().create_args_for_root(root_fn, is_module, concrete_args)
        state = vars(self.root)
        for name, value in self._scalars.items():
            state[name] = self.create_proxy("call_function", SelfScalar(name, value), (), {})
        return result


def _symbolic_trace(module: torch.nn.Module) -> torch.fx.GraphModule:
    mode = _SYMBOLIC.get()
    scalars = {
        name: value
        for name, value in vars(module).items()
        if type(value) is float and not name.startswith("_")
    }
    if mode is None or not scalars:
        return torch.fx.symbolic_trace(module)
    tracer = _ScalarTracer(scalars)
    try:
        graph = tracer.trace(module)
    except Exception:
        graph = None
    finally:
        vars(module).update(scalars)
    if graph is None:  # e.g. `if self.scale > 1`: Python needs the value; freeze them all
        return torch.fx.symbolic_trace(module)
    for node in list(graph.nodes):
        scalar = self_scalar(node)
        if scalar is None:
            continue
        if node.users:
            mode.traced.append(scalar.name)
        else:
            graph.erase_node(node)
    return torch.fx.GraphModule(module, graph, type(module).__name__)


def apply_general_first(rewrite_pass: RewritePass, program: Program) -> Rewrite:
    """Run a pass with the module's float attributes kept symbolic; only when that finds
    nothing (or fails) and such an attribute was involved, run it again with their values
    frozen in (then `emit` adds a guard that refuses other values at construction)."""
    with symbolic_scalars() as mode:
        try:
            rewrite = rewrite_pass.apply(program)
        except PassError:
            if not mode.traced:
                raise
            rewrite = None
    if rewrite is not None and (rewrite.source is not None or not mode.traced):
        return rewrite
    return rewrite_pass.apply(program)


def _has_path(root: Any, target: str) -> bool:
    for part in target.split("."):
        if not hasattr(root, part):
            return False
        root = getattr(root, part)
    return True


def propagate(gm: torch.fx.GraphModule, inputs: list[Any]) -> None:
    """(Re)compute `node.meta["tensor_meta"]` for every node, e.g. after a rewrite."""
    gm.recompile()
    arguments = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    try:  # ShapeProp prints the traceback of a failure itself; the message is enough
        with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
            ShapeProp(gm).propagate(*arguments)
    except Exception as error:
        raise TraceError(f"shape propagation failed: {_one_line(error)}") from None


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    first = text.split(". ")[0].rstrip(".")
    return first[:200]


def _located(error: BaseException, filename: str | None, program: Program) -> str:
    """The error's first sentence plus the user's forward line that raised it."""
    message = _one_line(error)
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == filename]
    if not frames:
        return message
    frame = frames[-1]
    lines = program.source.splitlines()  # the text the module came from, not the disk's
    line = (frame.line or "").strip()
    if frame.lineno and frame.lineno <= len(lines):
        line = lines[frame.lineno - 1].strip()
    return f"{message} (line {frame.lineno}: {line})" if line else message
