"""torch.fx plumbing shared by the graph-rewriting passes: trace a Program with shapes, read
node arguments uniformly, and emit a rewritten graph back as a standalone ModelNew module.

The emitted module keeps the original `__init__` (so parameter names and checkpoints carry
over) and replaces only `forward` with readable code generated from the graph, so a later
pass can trace it again.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import contextvars
import copy
import io
import keyword
import math
import operator
import re
import textwrap
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from torch.fx.passes.shape_prop import ShapeProp, TensorMetadata

from agents import pyast
from agents.offline import source as src
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


# -- reading nodes ---------------------------------------------------------------------------


def tensor_meta(node: Any) -> TensorMetadata | None:
    meta = node.meta.get("tensor_meta") if isinstance(node, torch.fx.Node) else None
    return meta if isinstance(meta, TensorMetadata) else None


def tensor_shape(node: Any) -> tuple[int, ...] | None:
    """The node's tensor shape from shape propagation; None for non-tensors and tuples."""
    meta = tensor_meta(node)
    return tuple(int(d) for d in meta.shape) if meta is not None else None


def tensor_dtype(node: Any) -> torch.dtype | None:
    meta = tensor_meta(node)
    return meta.dtype if meta is not None else None


def is_scalar(value: Any) -> bool:
    """A Python number constant (bools excluded: they are flags, not factors)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


_OPERATORS = {
    operator.add: "add",
    operator.sub: "sub",
    operator.mul: "mul",
    operator.truediv: "div",
    operator.neg: "neg",
    operator.matmul: "matmul",
    operator.pow: "pow",
    operator.getitem: "getitem",
}
_FUNCTION_ALIASES = {"true_divide": "div", "multiply": "mul", "subtract": "sub", "negative": "neg"}


def op_name(node: Any) -> str | None:
    """One name for an op whatever its spelling: `torch.sum(x)`, `x.sum()` -> "sum";
    `a * b`, `torch.mul` -> "mul"; `F.linear` -> "linear". call_module nodes give None."""
    if not isinstance(node, torch.fx.Node):
        return None
    if node.op == "call_method":
        return _FUNCTION_ALIASES.get(node.target, node.target)
    if node.op != "call_function":
        return None
    if node.target in _OPERATORS:
        return _OPERATORS[node.target]
    name = function_name(node.target)
    if name is None or not name.startswith(("torch.", "F.")):
        return None
    base = name.rsplit(".", 1)[-1]
    return _FUNCTION_ALIASES.get(base, base)


def call_module(gm: torch.fx.GraphModule, node: Any) -> torch.nn.Module | None:
    """The submodule a call_module node calls, else None."""
    if isinstance(node, torch.fx.Node) and node.op == "call_module":
        return gm.get_submodule(str(node.target))
    return None


# Positional parameter names of the ops the passes read; methods put `self` in "input".
SIGNATURES: dict[str, tuple[str, ...]] = {
    **{n: ("input", "dim", "keepdim") for n in ("sum", "mean", "amax", "amin", "logsumexp")},
    **{n: ("input", "dim", "keepdim") for n in ("max", "min", "prod", "nansum", "argmax")},
    **{n: ("input", "other") for n in ("add", "sub", "mul", "div", "matmul", "mm", "rsub")},
    **{n: ("input", "dim") for n in ("softmax", "log_softmax", "cumsum", "cumprod")},
    "linear": ("input", "weight", "bias"),
    "addmm": ("input", "mat1", "mat2"),
    "dropout": ("input", "p", "training", "inplace"),
    "transpose": ("input", "dim0", "dim1"),
    "squeeze": ("input", "dim"),
    "unsqueeze": ("input", "dim"),
    "neg": ("input",),
    "t": ("input",),
    "clone": ("input",),
    "contiguous": ("input",),
    "getitem": ("input", "index"),
}


def arguments(node: torch.fx.Node, names: tuple[str, ...] | None = None) -> dict[str, Any] | None:
    """The node's arguments by name (positional ones named from SIGNATURES); None when the
    op is unknown or has more positional arguments than its signature names."""
    names = names or SIGNATURES.get(op_name(node) or "")
    if names is None or len(node.args) > len(names):
        return None
    bound = dict(zip(names, node.args, strict=False))
    bound.update(node.kwargs)
    if "self" in bound and "input" not in bound:
        bound["input"] = bound.pop("self")
    return bound


def dims_of(value: Any, rank: int) -> tuple[int, ...] | None:
    """Normalised non-negative dims from an int or a sequence of ints; None otherwise."""
    items = list(value) if isinstance(value, list | tuple) else [value]
    if not items or not all(isinstance(d, int) and not isinstance(d, bool) for d in items):
        return None
    if not all(-rank <= d < rank for d in items) and rank > 0:
        return None
    return tuple(sorted({d % rank if rank else 0 for d in items}))


def replace_uses(node: torch.fx.Node, value: Any) -> None:
    """Point every user of `node` at `value` (a node or a constant); `node` becomes dead."""
    for user in list(node.users):
        user.args = _substitute(user.args, node, value)
        user.kwargs = _substitute(user.kwargs, node, value)


def _substitute(value: Any, old: torch.fx.Node, new: Any) -> Any:
    if value is old:
        return new
    if isinstance(value, tuple | list):
        return type(value)(_substitute(v, old, new) for v in value)
    if isinstance(value, dict):
        return {k: _substitute(v, old, new) for k, v in value.items()}
    if isinstance(value, slice):
        parts = (value.start, value.stop, value.step)
        return slice(*(_substitute(v, old, new) for v in parts))
    return value


_OPERATOR_WRITES = frozenset(
    {operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv}
    | {operator.ifloordiv, operator.imod, operator.ipow, operator.imatmul, operator.iand}
    | {operator.ior, operator.ixor, operator.ilshift, operator.irshift}
)


def is_mutating(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Does the node write into a tensor in place (x.add_, inplace=True, out=, setitem)?"""
    if node.kwargs.get("inplace") is True or "out" in node.kwargs:
        return True
    if node.op == "call_method":
        return node.target.endswith("_") and not node.target.endswith("__")
    if node.op == "call_function":
        if node.target in _OPERATOR_WRITES:
            return True
        name = getattr(node.target, "__name__", "")
        operators = getattr(node.target, "__module__", "") in ("operator", "_operator")
        return not operators and name.endswith("_") and not name.endswith("__")
    module = call_module(gm, node)
    return bool(getattr(module, "inplace", False))


def mutates_anything(gm: torch.fx.GraphModule) -> bool:
    """Does any in-place op write into a tensor that something else could see? Writing
    into a fresh intermediate that nothing read before (conv -> ReLU(inplace=True)) is
    harmless: rewrites only move reads later, never across such a write."""
    order = {node: index for index, node in enumerate(gm.graph.nodes)}
    return any(is_mutating(gm, node) and not _private_write(node, order) for node in gm.graph.nodes)


def _private_write(node: torch.fx.Node, order: dict[torch.fx.Node, int]) -> bool:
    target = node.args[0] if node.args else None
    return (
        "out" not in node.kwargs
        and isinstance(target, torch.fx.Node)
        and target.op in ("call_function", "call_method", "call_module")
        and _view_source(target) is None
        and all(order[user] >= order[node] for user in target.users)
    )


def has_effects(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Must the node run even when nobody uses its result? In-place writes, modules that
    keep buffers (BatchNorm statistics) or are not torch's own, and random ops (they
    advance the generator that later random ops draw from)."""
    if node.op in ("placeholder", "output") or is_mutating(gm, node):
        return True
    name = op_name(node) or ""
    module = call_module(gm, node)
    if "dropout" in name:
        args = arguments(node, ("input", "p", "training", "inplace")) or {}
        return args.get("p", 0.5) != 0 and args.get("training", args.get("train")) is not False
    if name.startswith(("rand", "bernoulli", "multinomial", "normal", "poisson")):
        return True
    if module is None:
        return False
    if isinstance(module, torch.nn.modules.dropout._DropoutNd):
        return module.p != 0
    return (
        not type(module).__module__.startswith("torch.nn.")
        or any(True for _ in module.buffers())
        or isinstance(module, torch.nn.RReLU)
    )


def prune(gm: torch.fx.GraphModule) -> None:
    """Drop nodes nobody uses unless they have effects; fx's own dead-code pass keeps too
    little (random ops) or too much (every module call)."""
    changed = True
    while changed:
        changed = False
        for node in reversed(list(gm.graph.nodes)):
            if node.users or has_effects(gm, node):
                continue
            gm.graph.erase_node(node)
            changed = True


VIEW_OPS = frozenset(
    {"view", "reshape", "squeeze", "unsqueeze", "transpose", "permute", "t", "expand"}
    | {"flatten", "unflatten", "narrow", "select", "getitem", "contiguous", "view_as", "unbind"}
    | {"swapaxes", "swapdims", "movedim", "moveaxis", "split", "chunk", "tensor_split", "T"}
    | {"mT", "detach", "to", "float", "double", "type", "type_as", "expand_as", "as_strided"}
    | {"diagonal", "unfold", "data", "real", "view_as_real", "dropout", "alpha_dropout"}
    | {"dropout1d", "dropout2d", "dropout3d", "feature_alpha_dropout", "feature_dropout"}
)
"""Ops whose result may share memory with their first argument (a cast or dropout may
return the input itself)."""
_ALIASING_MODULES = (
    torch.nn.Identity,
    torch.nn.Flatten,
    torch.nn.Unflatten,
    torch.nn.modules.dropout._DropoutNd,
)


def _view_source(node: torch.fx.Node) -> Any:
    name = op_name(node)
    if node.op == "call_function" and node.target is builtins.getattr:
        name = node.args[1] if isinstance(node.args[1], str) else None
    if name in VIEW_OPS and node.args:
        return node.args[0]
    owner = node.graph.owning_module
    if node.op != "call_module" or not node.args or owner is None:
        return None
    module = owner.get_submodule(str(node.target))
    return node.args[0] if isinstance(module, _ALIASING_MODULES) else None


def alias_base(node: Any) -> Any:
    """The node whose memory `node` may share, following view-like ops back."""
    while isinstance(node, torch.fx.Node):
        source = _view_source(node)
        if not isinstance(source, torch.fx.Node):
            return node
        node = source
    return node


def returned_as_view(node: torch.fx.Node) -> bool:
    """Is the node (or a view of it) among forward's outputs?"""
    stack, seen = [node], set()
    while stack:
        current = stack.pop()
        for user in current.users:
            if user.op == "output":
                return True
            if user not in seen and _view_source(user) is current:
                seen.add(user)
                stack.append(user)
    return False


def can_alias(gm: torch.fx.GraphModule, node: torch.fx.Node, replacement: Any) -> bool:
    """May `node` (a fresh tensor) be replaced by `replacement`, which may share memory with
    other tensors? Not when something writes into the node in place (the write would land
    in the shared tensor), nor when an input or parameter would be returned as the result
    (the caller would get the input itself)."""
    if any(is_mutating(gm, user) for user in node.users):
        return False
    base = alias_base(replacement)
    shared = isinstance(base, torch.fx.Node) and base.op in ("placeholder", "get_attr")
    return not (shared and returned_as_view(node))


class Builder:
    """Adds nodes at the graph's insertion point; scalar arithmetic stays in Python. None is
    the neutral value: 1 for mul/div, 0 for add/sub/neg."""

    def __init__(self, graph: torch.fx.Graph):
        self.graph = graph

    def call(self, target: Callable[..., Any], *args: Any, **kwargs: Any) -> torch.fx.Node:
        return self.graph.call_function(target, tuple(args), kwargs)

    def method(self, name: str, *args: Any, **kwargs: Any) -> torch.fx.Node:
        return self.graph.call_method(name, tuple(args), kwargs)

    def attr(self, target: str) -> torch.fx.Node:
        return self.graph.get_attr(target)

    def mul(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        if is_scalar(a) and is_scalar(b):
            return a * b
        return self.call(operator.mul, a, b)

    def div(self, a: Any, b: Any) -> Any:
        if b is None:
            return a
        if a is None:
            return 1.0 / b if is_scalar(b) else self.call(operator.truediv, 1.0, b)
        if is_scalar(a) and is_scalar(b):
            return a / b
        return self.call(operator.truediv, a, b)

    def add(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        if is_scalar(a) and is_scalar(b):
            return a + b
        return self.call(operator.add, a, b)

    def sub(self, a: Any, b: Any) -> Any:
        if b is None:
            return a
        if a is None:
            return self.neg(b)
        if is_scalar(a) and is_scalar(b):
            return a - b
        return self.call(operator.sub, a, b)

    def neg(self, a: Any) -> Any:
        if a is None:
            return None
        return -a if is_scalar(a) else self.call(operator.neg, a)


# -- emitting --------------------------------------------------------------------------------

_IMPORTS = {
    "F": "import torch.nn.functional as F",
    "operator": "import operator",
    "math": "import math",
}
_BINARY = {
    operator.add: "+",
    operator.sub: "-",
    operator.mul: "*",
    operator.truediv: "/",
    operator.floordiv: "//",
    operator.mod: "%",
    operator.pow: "**",
    operator.matmul: "@",
    operator.and_: "&",
    operator.or_: "|",
    operator.xor: "^",
    operator.lshift: "<<",
    operator.rshift: ">>",
    operator.eq: "==",
    operator.ne: "!=",
    operator.lt: "<",
    operator.le: "<=",
    operator.gt: ">",
    operator.ge: ">=",
}
_UNARY = {operator.neg: "-", operator.pos: "+", operator.invert: "~"}
_NAMESPACES = (
    ("torch", torch),
    ("F", F),
    ("torch.linalg", torch.linalg),
    ("torch.special", torch.special),
    ("torch.fft", torch.fft),
    ("math", math),
    ("operator", operator),
)
_FUNCTION_NAMES: dict[int, str] = {}


def function_name(target: Callable[..., Any]) -> str | None:
    """How generated code spells a torch/F/math/operator function, e.g. "F.gelu"."""
    if not _FUNCTION_NAMES:
        for prefix, namespace in _NAMESPACES:
            for name in dir(namespace):
                if name.startswith("_"):
                    continue
                value = getattr(namespace, name, None)
                if callable(value) and not isinstance(value, type):
                    _FUNCTION_NAMES.setdefault(id(value), f"{prefix}.{name}")
    return _FUNCTION_NAMES.get(id(target))


class SelfMethod:
    """A call_function target that emits as `self.<name>(...)`: a helper method the pass adds
    through emit(methods=...). Calling it in Python runs `impl`, so shapes still propagate."""

    def __init__(self, name: str, impl: Callable[..., Any]):
        self.name = name
        self.impl = impl
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.impl(*args, **kwargs)


def emit(
    program: Program,
    gm: torch.fx.GraphModule,
    *,
    doc: str,
    methods: dict[str, str] | None = None,
) -> str:
    """A complete ModelNew module: the program's prelude and `__init__` (and other methods)
    unchanged, `forward` generated from `gm.graph`. `methods` adds or replaces methods
    (name -> class-indented source), for SelfMethod targets."""
    try:
        parts = src.class_parts(_with_init(program.source, program.class_name), program.class_name)
    except src.SourceError as error:
        raise TraceError(f"cannot take the module apart: {error}") from None
    reserved = _module_names(program)
    writer = _Writer(program.module, reserved)
    forward = writer.forward(gm.graph)
    new_methods = {name: text for name, text in parts.methods.items() if name != "forward"}
    new_methods["forward"] = forward
    new_methods.update(methods or {})
    imports = tuple(line for name, line in _IMPORTS.items() if name in writer.used)
    doc = " ".join(doc.replace("\\", "/").replace('"', "'").split())  # a safe docstring
    baked = baked_attributes(program.module, parts.methods.get("forward", ""), forward)
    prelude_extra = ""
    if baked and "__init__" in new_methods:
        init = new_methods["__init__"].rstrip()
        check = f"{_body_indent(init)}_check_specialised(self, {baked!r})"
        new_methods["__init__"] = f"{init}\n{check}\n"
        if "def _check_specialised" not in parts.prelude:
            prelude_extra = _SPECIALISED_HELPER
    return src.build_module(
        parts, new_methods, doc=doc, imports=imports, prelude_extra=prelude_extra
    )


_SPECIALISED_HELPER = '''
def _check_specialised(module, values):
    """kernel-agent built these attributes' values into forward and verified it for them only:
    other constructor arguments need a new optimisation run, not a silently wrong result."""
    for name, value in values.items():
        if getattr(module, name, value) != value:
            raise ValueError(
                f"{type(module).__name__} was specialised by kernel-agent for {name}={value!r}, "
                f"not {getattr(module, name)!r}: optimise again for these arguments"
            )
'''


def _body_indent(method: str) -> str:
    """The indentation of a method's body (the user's, whatever width they use)."""
    lines = method.splitlines()
    try:
        function = pyast.parse(textwrap.dedent(method)).body[0]
        line = lines[function.body[0].lineno - 1]
    except (SyntaxError, IndexError, AttributeError):
        return " " * 8
    return line[: len(line) - len(line.lstrip())]


def baked_attributes(module: Any, old_forward: str, new_forward: str) -> dict[str, Any]:
    """Plain Python scalars (ints, floats, bools) the old forward read from `self` and the
    generated one no longer does: fx froze their values into the graph."""
    state = vars(module) if module is not None else {}
    read = set(re.findall(r"\bself\.([A-Za-z_]\w*)", old_forward))
    return {
        name: state[name]
        for name in sorted(read)
        if name != "training"
        and isinstance(state.get(name), bool | int | float)
        and not re.search(rf"\bself\.{name}\b", new_forward)
    }


def _with_init(source: str, class_name: str) -> str:
    """The source with `def __init__(self): super().__init__()` added to a class that
    inherits nn.Module's (the emitted class always spells its __init__ out)."""
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return source
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or node.name != class_name:
            continue
        if any(isinstance(i, ast.FunctionDef) and i.name == "__init__" for i in node.body):
            return source
        lines = source.splitlines(keepends=True)
        first = node.body[0].lineno - 1
        if first <= node.lineno - 1:
            return source  # a one-line class body: leave the error to class_parts
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        init = f"{indent}def __init__(self):\n{indent}    super().__init__()\n\n"
        return "".join([*lines[:first], init, *lines[first:]])
    return source


def _module_names(program: Program) -> set[str]:
    """Names the forward must not shadow: the module's globals and Python's builtins."""
    names = set(dir(builtins)) | set(keyword.kwlist) | {"self", "torch", "nn", *_IMPORTS}
    forward = getattr(type(program.module), "forward", None)
    names |= set(getattr(forward, "__globals__", {}))
    try:
        tree = pyast.parse(program.source)
    except SyntaxError:
        return names
    for node in tree.body:  # module level only: forward's own locals are free to reuse
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


class _Writer:
    """Turns a graph into the source of `def forward(self, ...)`, one statement a node."""

    def __init__(self, root: torch.nn.Module, reserved: set[str]):
        self.root = root
        self.reserved = reserved
        forward = getattr(type(root), "forward", None)
        self.globals = getattr(forward, "__globals__", {})
        self.names: dict[torch.fx.Node, str] = {}
        self.used: set[str] = set()
        self.taken: set[str] = set()

    def forward(self, graph: torch.fx.Graph) -> str:
        params: list[str] = []
        body: list[str] = []
        for node in graph.nodes:
            if node.op == "placeholder":
                target = str(node.target)
                name = target.lstrip("*")
                self.names[node] = name
                self.taken.add(name)
                default = f"={self.value(node.args[0])}" if node.args else ""
                params.append(target + default)
        for node in graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                body.append(f"return {self.value(node.args[0])}")
                continue
            if node.op == "get_attr":  # written in place: `self.linear.weight`, not a local
                self.names[node] = self.attribute(str(node.target))
                continue
            scalar = self_scalar(node)
            if scalar is not None:  # likewise `self.scaling_factor`, read at call time
                self.names[node] = self.attribute(scalar.name)
                continue
            expression = self.expression(node)
            if not node.users:
                body.append(expression)
                continue
            self.names[node] = self.fresh(node.name)
            body.append(f"{self.names[node]} = {expression}")
        signature = ", ".join(["self", *params])
        lines = [f"def forward({signature}):", *(f"    {line}" for line in body)]
        return "\n".join(f"    {line}" for line in lines) + "\n"

    def fresh(self, base: str) -> str:
        name = base if base.isidentifier() else "v"
        while name in self.reserved or name in self.taken:
            name = f"{base}_v" if name == base else name + "_"
        self.taken.add(name)
        return name

    def expression(self, node: torch.fx.Node) -> str:
        if node.op == "get_attr":
            return self.attribute(str(node.target))
        if node.op == "call_module":
            return f"{self.attribute(str(node.target))}({self.call_args(node.args, node.kwargs)})"
        if node.op == "call_method":
            first, *rest = node.args
            return f"{self.operand(first)}.{node.target}({self.call_args(rest, node.kwargs)})"
        if node.op == "call_function":
            return self.function(node)
        raise TraceError(f"cannot emit a {node.op} node")

    def function(self, node: torch.fx.Node) -> str:
        target, args, kwargs = node.target, node.args, node.kwargs
        if target in _BINARY and len(args) == 2 and not kwargs:
            return f"{self.operand(args[0])} {_BINARY[target]} {self.operand(args[1])}"
        if target in _UNARY and len(args) == 1 and not kwargs:
            return f"{_UNARY[target]}{self.operand(args[0])}"
        if target is operator.getitem and len(args) == 2 and not kwargs:
            return f"{self.operand(args[0])}[{self.index(args[1])}]"
        if target is builtins.getattr and len(args) == 2 and isinstance(args[1], str):
            return f"{self.operand(args[0])}.{args[1]}"
        if isinstance(target, SelfMethod):
            return f"self.{target.name}({self.call_args(args, kwargs)})"
        name = function_name(target)
        if name is None:
            short = getattr(target, "__name__", "")
            if not short or self.globals.get(short) is not target:
                raise TraceError(f"cannot name the function {target!r} in generated code")
            name = short
        self.used.add(name.split(".")[0])
        return f"{name}({self.call_args(args, kwargs)})"

    def call_args(self, args: Iterable[Any], kwargs: dict[str, Any]) -> str:
        items = [self.value(a) for a in args]
        items += [f"{k}={self.value(v)}" for k, v in kwargs.items()]
        return ", ".join(items)

    def operand(self, value: Any) -> str:
        """A value placed next to an operator: parenthesised unless it is atomic."""
        text = self.value(value)
        number = is_scalar(value) and math.isfinite(value) and value >= 0
        return text if isinstance(value, torch.fx.Node) or number else f"({text})"

    def index(self, value: Any) -> str:
        if isinstance(value, tuple) and value:
            return ", ".join(self.index(v) for v in value) + ("," if len(value) == 1 else "")
        if isinstance(value, slice):
            start, stop, step = (
                "" if v is None else self.value(v) for v in (value.start, value.stop, value.step)
            )
            return f"{start}:{stop}" + (f":{step}" if step else "")
        return self.value(value)

    def value(self, value: Any) -> str:
        if isinstance(value, torch.fx.Node):
            return self.names[value]
        if value is None or isinstance(value, bool | int | str):
            return repr(value)
        if isinstance(value, float):
            if math.isfinite(value):
                return repr(value)
            self.used.add("math")
            return "math.nan" if math.isnan(value) else ("math.inf" if value > 0 else "-math.inf")
        if value is Ellipsis:
            return "..."
        if isinstance(value, torch.Size):
            value = tuple(value)
        if isinstance(value, tuple):
            items = [self.value(v) for v in value]
            return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
        if isinstance(value, list):
            return f"[{', '.join(self.value(v) for v in value)}]"
        if isinstance(value, dict):
            return (
                "{" + ", ".join(f"{self.value(k)}: {self.value(v)}" for k, v in value.items()) + "}"
            )
        if isinstance(value, slice):
            parts = (value.start, value.stop, value.step)
            return f"slice({', '.join(self.value(v) for v in parts)})"
        if isinstance(value, torch.dtype | torch.memory_format | torch.layout):
            return str(value)
        if isinstance(value, torch.device):
            return f"torch.device({str(value)!r})"
        raise TraceError(
            f"cannot write a constant of type {type(value).__name__} in generated code"
        )

    def attribute(self, target: str) -> str:
        """`self.a.b` for "a.b", `self.blocks[0]` inside ModuleList/Sequential, and the
        original attribute for a tensor fx lifted into `_tensor_constantN`."""
        owner: Any = self.root
        text = "self"
        for part in target.split("."):
            if isinstance(owner, torch.nn.ModuleDict | torch.nn.ParameterDict):
                text += f"[{part!r}]"
            elif part.isdigit() and isinstance(
                owner, torch.nn.ModuleList | torch.nn.Sequential | torch.nn.ParameterList
            ):
                text += f"[{part}]"
            elif part.isidentifier() and not keyword.iskeyword(part):
                text += f".{part}"
            else:
                raise TraceError(f"cannot write the attribute path {target!r}")
            if not hasattr(owner, part):
                raise TraceError(f"forward uses {target!r}, which the original module lacks")
            owner = getattr(owner, part)
        return text
