"""Source-level wrapping of `forward`, shared by the passes that keep the user's forward as it
is and put a thin layer around it (torch.compile, channels_last, CUDA graphs).

The original forward survives verbatim under a fresh name, with its decorators, so a later
pass (or a reader) still sees the user's code; the new forward keeps the original signature.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

from agents import pyast
from agents.offline import source as src
from agents.offline.passes.base import PassError, Program


@dataclass
class Wrapped:
    parts: src.ClassParts
    inner: str  # the fresh name the original forward now has, e.g. "_forward"
    params: str  # the forward's parameters after self, as written: "x, y=2, *rest"
    call: str  # how to pass them on: "x, y, *rest"
    tensor_names: list[str]  # plain positional parameters (candidates for tensors)


def wrap(program: Program, base: str) -> Wrapped:
    """Split the program and rename its forward to a fresh `base`-derived name."""
    try:
        parts = src.class_parts(program.source, program.class_name)
    except src.SourceError as error:
        raise PassError(f"cannot take the module apart: {error}") from None
    taken = set(parts.methods) | _assigned_attributes(parts)
    inner = base
    suffix = 1
    while inner in taken:
        suffix += 1
        inner = f"{base}{suffix}"
    forward = parts.methods["forward"]
    tree = pyast.parse(textwrap.dedent(forward))
    function = tree.body[0]
    if not isinstance(function, ast.FunctionDef):
        raise PassError("forward is not a plain function (async?)")
    params, call, names = _signature(function.args)
    parts.methods[inner] = re.sub(r"\bdef\s+forward\s*\(", f"def {inner}(", forward, count=1)
    del parts.methods["forward"]
    return Wrapped(parts, inner, params, call, names)


def forward_method(wrapped: Wrapped, body: list[str]) -> str:
    """`def forward(self, <original params>):` with `body` (unindented statements)."""
    params = f"self, {wrapped.params}" if wrapped.params else "self"
    lines = [f"    def forward({params}):"] + [f"        {line}" if line else "" for line in body]
    return "\n".join(lines) + "\n"


def module(wrapped: Wrapped, forward: str, *, doc: str, prelude_extra: str = "") -> str:
    """The complete ModelNew module: original methods, the renamed forward, the new one."""
    methods = dict(wrapped.parts.methods)
    methods["forward"] = forward
    return src.build_module(wrapped.parts, methods, doc=doc, prelude_extra=prelude_extra)


def _signature(args: ast.arguments) -> tuple[str, str, list[str]]:
    positional = [*args.posonlyargs, *args.args][1:]  # drop self
    trimmed = ast.arguments(
        posonlyargs=[],
        args=positional,
        vararg=args.vararg,
        kwonlyargs=args.kwonlyargs,
        kw_defaults=args.kw_defaults,
        kwarg=args.kwarg,
        defaults=args.defaults[-len(positional) :] if positional and args.defaults else [],
    )
    params = ast.unparse(trimmed)
    call = [a.arg for a in positional]
    if args.vararg:
        call.append(f"*{args.vararg.arg}")
    call += [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
    if args.kwarg:
        call.append(f"**{args.kwarg.arg}")
    return params, ", ".join(call), [a.arg for a in positional]


def _assigned_attributes(parts: src.ClassParts) -> set[str]:
    """`self.<name>` attributes the class sets anywhere, so a helper name never clashes."""
    text = "\n".join([*parts.methods.values(), *parts.class_body_extra])
    return set(re.findall(r"\bself\.(\w+)\s*=", text)) | set(re.findall(r"^\s*(\w+)\s*=", text))
