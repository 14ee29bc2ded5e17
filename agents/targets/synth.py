"""A KernelBench problem for a target that is not the file's `Model`.

The search optimises `Model` against itself. A plain function, a Triton launcher or a
function calling a `load_inline` extension becomes a `Model` whose forward calls it with the
file's `get_inputs()`. The user's text comes first and keeps its line numbers, so profiled
hot lines still point at the user's lines.

If the file defines its own `Model` (or `ModelNew`), those names are renamed in place
(identifiers only, same lines) rather than giving the wrapper another name: the task loader,
the offline rewrite passes and the static checker all key on the names `Model` and
`ModelNew`, so the wrapper must own them.
"""

from __future__ import annotations

import ast
import io
import tokenize

from agents import pyast
from agents.task import CANDIDATE_CLASS, REFERENCE_CLASS

WRAPPER_MARK = "# --- kernel-agent: the optimisation target as a KernelBench Model ---"
_TRITON_DECORATORS = ("jit", "autotune", "heuristics")


class SynthesisError(Exception):
    """The file cannot become a problem; one line saying what to add. `snippet` is code a
    client can offer to insert (empty when there is nothing to insert)."""

    def __init__(self, message: str, snippet: str = "") -> None:
        super().__init__(message)
        self.snippet = snippet


def needs_synthesis(target: str, target_kind: str = "module") -> bool:
    """Only the file's own `Model` is a problem as it stands."""
    return not (target == REFERENCE_CLASS and target_kind == "module")


def synthesize_problem(source: str, target: str) -> str:
    """The problem module text: `source` followed by a `Model` that calls `target`.
    `target` == "Model" returns `source` itself (after the same checks)."""
    try:
        tree = pyast.parse(source)
    except SyntaxError as error:
        raise SynthesisError(f"line {error.lineno}: syntax error: {error.msg}") from None
    defs = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    node = defs.get(target)
    if node is None:
        raise SynthesisError(f"no function or class `{target}` at module level")
    if "get_inputs" not in defs:
        raise _missing_inputs(node)
    if target == REFERENCE_CLASS:
        return source if "get_init_inputs" in defs else _append(source, _INIT_INPUTS)
    if isinstance(node, ast.AsyncFunctionDef):
        raise SynthesisError(f"`{target}` is async: optimise a synchronous function")
    if isinstance(node, ast.FunctionDef) and _is_triton_kernel(node):
        raise SynthesisError(
            f"`{target}` is a Triton kernel, which is launched, not called: optimise the "
            f"Python function that launches it (`{target}[grid](...)`) instead"
        )
    text = _rename_models(source, set(defs))
    is_function = isinstance(node, ast.FunctionDef)
    block = _function_wrapper(node) if is_function else _class_wrapper(node)  # type: ignore[arg-type]
    if "get_init_inputs" not in defs:
        block += _INIT_INPUTS
    return _append(text, block)


_INIT_INPUTS = "\n\ndef get_init_inputs():\n    return []\n"


def _append(text: str, block: str) -> str:
    return text.rstrip("\n") + "\n\n\n" + block.lstrip("\n")


def _function_wrapper(node: ast.FunctionDef) -> str:
    params, call = _signature(node.args)
    return (
        f"{WRAPPER_MARK}\nimport torch\n\n\n"
        f"class {REFERENCE_CLASS}(torch.nn.Module):\n"
        f'    """Calls `{node.name}` with get_inputs()\'s values, so it can be optimised."""\n\n'
        "    def __init__(self, *init_inputs):\n"
        "        super().__init__()\n\n"
        f"    def forward({params}):\n"
        f"        return {node.name}({call})\n"
    )


def _class_wrapper(node: ast.ClassDef) -> str:
    forward = next(
        (f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None
    )
    if forward is None:
        raise SynthesisError(f"class `{node.name}` has no forward() to optimise")
    params, call = _signature(forward.args, drop_self=True)
    return (
        f"{WRAPPER_MARK}\nimport torch\n\n\n"
        f"class {REFERENCE_CLASS}(torch.nn.Module):\n"
        f'    """Runs `{node.name}` with get_inputs()\'s values, so it can be optimised."""\n\n'
        "    def __init__(self, *init_inputs):\n"
        "        super().__init__()\n"
        f"        self.inner = {node.name}(*init_inputs)\n\n"
        f"    def forward({params}):\n"
        f"        return self.inner({call})\n"
    )


def _signature(args: ast.arguments, drop_self: bool = False) -> tuple[str, str]:
    """forward's parameter list (the target's own, annotations and defaults included) and
    the matching call's arguments."""
    args = ast.arguments(
        posonlyargs=list(args.posonlyargs),
        args=list(args.args),
        vararg=args.vararg,
        kwonlyargs=list(args.kwonlyargs),
        kw_defaults=list(args.kw_defaults),
        kwarg=args.kwarg,
        defaults=list(args.defaults),
    )
    if drop_self:
        if args.posonlyargs:
            args.posonlyargs.pop(0)
        elif args.args:
            args.args.pop(0)
    params, call = parameters_and_call(args)
    return ("self, " + params if params else "self"), call


def parameters_and_call(args: ast.arguments) -> tuple[str, str]:
    """A function's parameter list (annotations and defaults included) and the arguments of
    a call that passes each parameter on unchanged."""
    calls = [a.arg for a in args.posonlyargs + args.args]
    if args.vararg:
        calls.append(f"*{args.vararg.arg}")
    calls += [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
    if args.kwarg:
        calls.append(f"**{args.kwarg.arg}")
    return ast.unparse(args), ", ".join(calls)


def _is_triton_kernel(node: ast.FunctionDef) -> bool:
    for decorator in node.decorator_list:
        func = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = ast.unparse(func)
        if name.split(".")[-1] in _TRITON_DECORATORS and "triton" in name:
            return True
        if name in ("jit", "autotune"):  # from triton import jit
            return True
    return False


def _missing_inputs(node: ast.AST) -> SynthesisError:
    if isinstance(node, ast.ClassDef):
        forward = next(
            (f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "forward"),
            None,
        )
        names = [a.arg for a in forward.args.args[1:]] if forward else []
        call = f"{node.name}.forward({', '.join(names)})"
    else:
        positional = node.args.posonlyargs + node.args.args  # type: ignore[attr-defined]
        required = len(positional) - len(node.args.defaults)  # type: ignore[attr-defined]
        names = [a.arg for a in positional[: max(required, 1)]]
        call = f"{node.name}({', '.join(names)})"  # type: ignore[attr-defined]
    values = ", ".join("torch.randn(...)" for _ in names) or "..."
    comment = f"  # {', '.join(names)}" if names else ""
    snippet = f"\n\ndef get_inputs():\n    return [{values}]{comment}\n"
    return SynthesisError(
        f"add `def get_inputs(): return [{values}]` at module level: the inputs {call} is "
        "called with, as a list (one value per parameter, with the sizes to optimise for)",
        snippet,
    )


def _rename_models(source: str, taken: set[str]) -> str:
    """Rename the identifiers `Model` and `ModelNew` (not attributes, strings or comments)
    to free names, changing no line breaks."""
    renames = {}
    for name in (REFERENCE_CLASS, CANDIDATE_CLASS):
        new = f"User{name}"
        while new in taken or new in source:
            new += "_"
        renames[name] = new
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    hits: list[tuple[int, int, str, str]] = []
    previous = None
    for token in tokens:
        attribute = previous is not None and previous.type == tokenize.OP and previous.string == "."
        if token.type == tokenize.NAME and token.string in renames and not attribute:
            row, col = token.start
            hits.append((row, col, token.string, renames[token.string]))
        if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            previous = token
    lines = source.splitlines(keepends=True)
    for row, col, old, new in sorted(hits, reverse=True):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[col + len(old) :]
    return "".join(lines)
