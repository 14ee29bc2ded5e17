"""A target named on the command line: `FILE.py` (the file's `Model`) or `FILE.py::NAME`.

NAME is anything the editor offers to optimise in that file: a `Model`-like module class, a
Triton launcher, a plain function, a function calling a CUDA or C++ extension. It is found
from the syntax tree as the editor finds it, and becomes a KernelBench problem the same way
(`synth`), so the command line and the editor optimise the same thing.
"""

from __future__ import annotations

from pathlib import Path

from agents.request.settings import RequestError
from agents.request.target import Target
from agents.targets.find import find_definition, find_targets
from agents.targets.model import HARNESS
from agents.targets.model import Target as FoundTarget
from agents.targets.syntax import def_name, definition, is_triton_kernel, parse_text, top_level
from agents.targets.synth import SynthesisError, synthesize_problem
from agents.task import SourceFile, TaskLoadError, outline_problem

SEPARATOR = "::"

KIND_WORDS = {
    "module": "module",
    "function": "function",
    "triton": "Triton launcher",
    "cuda": "CUDA launcher",
}


def split_spec(spec: str) -> tuple[Path, str | None]:
    """`FILE.py::NAME` → (FILE.py, NAME); `FILE.py` → (FILE.py, None)."""
    file, separator, name = str(spec).rpartition(SEPARATOR)
    if not separator:
        return Path(spec), None
    if not name.isidentifier():
        raise RequestError(f"{spec}: after '{SEPARATOR}' comes a class or function name")
    return Path(file), name


def load_target(spec: str | Path) -> Target:
    """The target `spec` names, checked without running any of its code; RequestError in
    one line for a file that cannot be read, an unknown NAME (listing the names it has) or
    a target that needs something added first (saying what)."""
    path, name = split_spec(str(spec))
    if path.is_dir():
        raise RequestError(
            f"{path} is a directory: give one problem file (FILE.py); to run every problem in "
            f"it, use `kernel-agent bench {path}`"
        )
    if not path.exists():  # as eval and bench say it
        raise RequestError(f"{path}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RequestError(f"cannot read {path}: {error}") from None
    if name is None:
        return _whole_file(path, text)
    targets = named_targets(text)
    found = next((t for t in targets if t.name == name), None)
    try:
        if found is None and find_definition(parse_text(text).root_node, name, "module"):
            synthesize_problem(text, name)  # says why it is no target (a Triton kernel...)
        if found is None:
            raise RequestError(f"{path} has no target `{name}`; {_names(targets)}")
        if not found.ready:
            raise RequestError(f"{path}::{name}: {found.missing}")
        return target_from_source(text, str(path), name, found.kind)
    except SynthesisError as error:
        raise RequestError(f"{path}::{name}: {error}") from None


def named_targets(text: str) -> list[FoundTarget]:
    """What can be named after '::': the editor's targets, then every other top-level
    function (a plain function is optimised against itself, as the editor's worker does;
    what it lacks, synthesis says)."""
    root = parse_text(text).root_node
    targets = find_targets(root)
    taken = {t.name for t in targets} | set(HARNESS)
    for node in top_level(root):
        inner = definition(node)
        plain = inner.type == "function_definition" and not is_triton_kernel(node)
        if plain and def_name(inner) not in taken:
            found = find_definition(root, def_name(inner), "function")
            if found is not None:
                targets.append(found)
    return targets


def target_from_source(source: str, label: str, name: str, kind: str) -> Target:
    """The problem to optimise for target `name` of `source` (its own text when `name` is
    the file's Model): the editor's jobs and the command line build it here. SynthesisError
    (with a snippet to insert) when the file lacks what it needs, RequestError for a kind
    that is none."""
    return Target(SourceFile(synthesize_problem(source, name), label), name, kind, source)


def _whole_file(path: Path, text: str) -> Target:
    """The file as it stands, a KernelBench problem with its own `Model`."""
    problem = SourceFile(text, str(path))
    try:
        outline_problem(problem)
    except TaskLoadError as error:
        targets = [t for t in named_targets(text) if t.name != "Model"]
        if not targets:
            raise RequestError(str(error)) from None
        raise RequestError(
            f"{error}; to optimise another target name it as {path}::NAME ({_names(targets)})"
        ) from None
    return Target(problem=problem, name=path.stem)


def _names(targets: list[FoundTarget]) -> str:
    """The targets a file has, in one line."""
    if not targets:
        return "it has none (a Model, a Triton launcher, a function)"
    listed = ", ".join(f"{t.name} ({KIND_WORDS.get(t.kind, t.kind)})" for t in targets)
    return f"its targets: {listed}"
