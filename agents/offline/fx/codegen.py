"""Emit a rewritten graph back as a standalone ModelNew module.

The emitted module keeps the original `__init__` (so parameter names and checkpoints carry
over) and replaces only `forward` with readable code generated from the graph, so a later
pass can trace it again."""

from __future__ import annotations

import ast
import builtins
import keyword
import math
import operator
import re
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.fx

from agents import pyast
from agents.offline import source as src
from agents.offline.fx.ops import function_name, is_scalar
from agents.offline.fx.tracing import TraceError, self_scalar
from agents.offline.passes.base import Program

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
