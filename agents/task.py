"""KernelBench tasks: a problem file (`Model`, `get_inputs`, `get_init_inputs`) and a candidate
(`ModelNew`), read from a path or from source text.

Two levels, because the parent must never run candidate code: `outline_*` only parses (safe
anywhere), `load_*` executes the module (only ever inside the sandboxed child).
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import secrets
import sys
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents import pyast

REFERENCE_CLASS = "Model"
REFERENCE_MARKER = "__kernel_agent_reference__"
"""A generated problem (the reference compiled, a candidate run under the reference's inputs)
names the class to judge as its reference with `__kernel_agent_reference__ = "ModelNew"` at
module level. It never rebinds `Model`: a reference's own `super(Model, self).__init__()`
looks `Model` up in its module at call time, so a rebound name builds the wrong class."""
SIZES = ("default", "gpu", "fit")
GPU_SIZES = "GPU_SIZES"
"""Optional module-level dict of size-constant overrides that `--size gpu` applies."""
SIZE_HELP = (
    "default: the file's own sizes; gpu: its GPU_SIZES; fit: its batch-like sizes scaled "
    "down until it fits this machine's memory and a short forward (named in the output)"
)
FIT_PREFIX = "fit:"
"""`--size fit` travels to the workers resolved, as `fit:batch_size=16,...` (the parent
chose the values once, so both workers draw the same shapes); agents/sizing resolves it."""
CANDIDATE_CLASS = "ModelNew"
PROBLEM_FUNCTIONS = ("get_inputs", "get_init_inputs")


class TaskLoadError(Exception):
    """A task or candidate that cannot be read or built; the message is one line for the user."""


@dataclass(frozen=True)
class SourceFile:
    """Python source and where it came from; `path` also names it in tracebacks."""

    text: str
    path: str | None = None

    @property
    def label(self) -> str:
        return self.path or "<source>"

    @classmethod
    def from_path(cls, path: str | Path) -> SourceFile:
        file = Path(path)
        if not file.is_file():
            raise TaskLoadError(f"{file}: no such file")
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise TaskLoadError(f"{file}: cannot read: {error}") from None
        return cls(text=text, path=str(file.resolve()))


@dataclass(frozen=True)
class Outline:
    """What a static parse tells about a file: its classes, functions and size constants."""

    classes: tuple[str, ...]
    functions: tuple[str, ...]
    constants: dict[str, Any] = field(default_factory=dict)
    reference_class: str = REFERENCE_CLASS


def outline(source: SourceFile) -> Outline:
    """Parse without running; a syntax error becomes a one-line TaskLoadError."""
    try:
        tree = pyast.parse(source.text, filename=source.label)
    except SyntaxError as error:
        raise TaskLoadError(f"{source.label}:{error.lineno}: syntax error: {error.msg}") from None
    classes, functions, constants = [], [], {}
    reference_class = REFERENCE_CLASS
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes.append(node.name)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions.append(node.name)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id.isupper():
                with contextlib.suppress(ValueError, SyntaxError, TypeError):
                    constants[target.id] = ast.literal_eval(node.value)
            named = node.value
            if (
                isinstance(target, ast.Name)
                and target.id == REFERENCE_MARKER
                and isinstance(named, ast.Constant)
                and isinstance(named.value, str)
            ):
                reference_class = named.value
    return Outline(tuple(classes), tuple(functions), constants, reference_class)


def as_reference(text: str, class_name: str) -> str:
    """`text` as a problem whose reference is `class_name` (defined in `text`), leaving the
    name `Model` bound to the file's own class (see REFERENCE_MARKER)."""
    return f"{text.rstrip()}\n\n{REFERENCE_MARKER} = {class_name!r}\n"


def outline_problem(source: SourceFile) -> Outline:
    """Check that a problem file has the three KernelBench names (its reference class is
    `Model` unless a generated problem names another, see REFERENCE_MARKER)."""
    shape = outline(source)
    if shape.reference_class not in shape.classes:
        raise TaskLoadError(f"{source.label}: no `class {shape.reference_class}` at module level")
    for name in PROBLEM_FUNCTIONS:
        if name not in shape.functions:
            raise TaskLoadError(f"{source.label}: no `def {name}()` at module level")
    return shape


def outline_candidate(source: SourceFile) -> Outline:
    """Check that a candidate file defines `ModelNew`."""
    shape = outline(source)
    if CANDIDATE_CLASS not in shape.classes:
        raise TaskLoadError(f"{source.label}: no `class {CANDIDATE_CLASS}` at module level")
    return shape


def describe_exception(error: BaseException, source: SourceFile, doing: str) -> str:
    """One line: where in the user's file it failed, the exception and what we were doing."""
    line = None
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename == source.label:
            line = frame.lineno
    where = f"{source.label}:{line}" if line else source.label
    message = " ".join(str(error).split()) or "(no message)"
    if len(message) > 400:
        message = message[:400] + "..."
    return f"{where}: {type(error).__name__}: {message} (while {doing})"


def load_module(source: SourceFile, module_name: str) -> types.ModuleType:
    """Execute source as a fresh module; any exception, SystemExit included, becomes a
    TaskLoadError. Only the sandboxed child calls this."""
    try:
        code = compile(source.text, source.label, "exec")
    except SyntaxError as error:
        raise TaskLoadError(f"{source.label}:{error.lineno}: syntax error: {error.msg}") from None
    module = types.ModuleType(module_name)
    module.__file__ = source.label
    sys.modules[module_name] = module
    # `inspect.getsource` must find the text: Triton's @jit reads each kernel's source.
    lines = source.text.splitlines(keepends=True)
    linecache.cache[source.label] = (len(source.text), None, lines, source.label)
    try:
        exec(code, module.__dict__)
    except BaseException as error:  # SystemExit and KeyboardInterrupt from a candidate too
        sys.modules.pop(module_name, None)
        raise TaskLoadError(describe_exception(error, source, "importing")) from None
    return module


@dataclass
class LoadedProblem:
    """A problem module after import: the reference class and its input factories."""

    module: types.ModuleType
    model_class: type
    get_inputs: Any
    get_init_inputs: Any


def load_problem(source: SourceFile, module_name: str | None = None) -> LoadedProblem:
    """Import a problem. Its module gets an unguessable name by default, so a candidate
    cannot simply `import` the reference."""
    shape = outline_problem(source)
    module = load_module(source, module_name or f"kernel_agent_reference_{secrets.token_hex(8)}")
    return LoadedProblem(
        module=module,
        model_class=_require(module, shape.reference_class, source, kind=type),
        get_inputs=_require(module, "get_inputs", source),
        get_init_inputs=_require(module, "get_init_inputs", source),
    )


def load_candidate(source: SourceFile, module_name: str = "kernel_agent_candidate") -> type:
    outline_candidate(source)
    module = load_module(source, module_name)
    return _require(module, CANDIDATE_CLASS, source, kind=type)


def _require(module: types.ModuleType, name: str, source: SourceFile, kind: type | None = None):
    value = getattr(module, name, None)
    if value is None:
        raise TaskLoadError(f"{source.label}: `{name}` is not defined after import")
    if kind is type and not isinstance(value, type):
        raise TaskLoadError(f"{source.label}: `{name}` is not a class")
    if kind is None and not callable(value):
        raise TaskLoadError(f"{source.label}: `{name}` is not callable")
    return value


def call_factory(factory: Any, source: SourceFile, name: str) -> list[Any]:
    """Call get_inputs/get_init_inputs and insist on a list or tuple."""
    try:
        values = factory()
    except BaseException as error:
        raise TaskLoadError(describe_exception(error, source, f"calling {name}()")) from None
    if not isinstance(values, list | tuple):
        raise TaskLoadError(
            f"{source.label}: {name}() must return a list, got {type(values).__name__}"
        )
    return list(values)


def build_model(model_class: type, init_inputs: list[Any], source: SourceFile) -> Any:
    """Instantiate Model/ModelNew; an exception becomes a one-line TaskLoadError."""
    try:
        return model_class(*init_inputs)
    except BaseException as error:
        raise TaskLoadError(
            describe_exception(error, source, f"building {model_class.__name__}")
        ) from None


def size_kind(size: str) -> str:
    """`default`, `gpu` or `fit` for any size a request may carry (a resolved `fit:...` too)."""
    return "fit" if size.startswith(FIT_PREFIX) else size


def check_size(size: str) -> None:
    """TaskLoadError unless `size` is one of SIZES or a resolved fit."""
    if size in SIZES:
        return
    if size.startswith(FIT_PREFIX):
        fit_overrides(size)
        return
    raise TaskLoadError(f"unknown size {size!r}: use one of {', '.join(SIZES)}")


def fitted_size(overrides: dict[str, int]) -> str:
    """The size string that carries a fit's chosen constants to the workers."""
    return FIT_PREFIX + ",".join(f"{name}={value}" for name, value in sorted(overrides.items()))


def fit_overrides(size: str) -> dict[str, int]:
    """The constants a resolved `fit:name=value,...` size sets."""
    overrides: dict[str, int] = {}
    for part in filter(None, size.removeprefix(FIT_PREFIX).split(",")):
        name, _, value = part.partition("=")
        if not name.isidentifier() or not value.isdigit() or int(value) < 1:
            raise TaskLoadError(f"malformed fitted size {size!r}: expected fit:NAME=INT,...")
        overrides[name] = int(value)
    return overrides


def apply_size(problem: LoadedProblem, size: str, source: SourceFile) -> None:
    """`gpu` applies the problem's GPU_SIZES overrides to its module constants (which
    get_inputs and get_init_inputs read at call time); `default` keeps the file's own sizes;
    a resolved `fit:...` sets the constants the parent chose. A problem without GPU_SIZES
    (a plain KernelBench file) keeps its sizes under `gpu`."""
    check_size(size)
    if size == "fit":
        raise TaskLoadError("--size fit must be resolved (agents.sizing) before a worker runs")
    if size.startswith(FIT_PREFIX):
        overrides: Any = fit_overrides(size)
        where = "the fit"
    else:
        overrides = getattr(problem.module, GPU_SIZES, None) if size == "gpu" else None
        where = GPU_SIZES
    if overrides is None:
        return
    if not isinstance(overrides, dict):
        raise TaskLoadError(f"{source.label}: {GPU_SIZES} must be a dict of constant overrides")
    unknown = [name for name in overrides if name not in vars(problem.module)]
    if unknown:
        raise TaskLoadError(
            f"{source.label}: {where} names constants the file does not define: "
            + ", ".join(sorted(unknown))
        )
    vars(problem.module).update(overrides)
