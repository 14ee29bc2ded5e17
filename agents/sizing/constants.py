"""Which module constants `--size fit` may change: read from the source, no code run.

A constant is a candidate when it is a module-level integer read by `get_inputs` and by
nothing else: a constant that `get_init_inputs`, `__init__`, `forward` or another constant
reads (a layer width, a reshape size, a normalized_shape) is part of the math and is never
changed. fit.py then keeps only the candidates that size nothing but a leading dimension.
"""

from __future__ import annotations

import ast

from agents import pyast


def input_only_constants(text: str) -> list[str]:
    """Module-level int constants read only inside `def get_inputs`, in file order."""
    try:
        tree = pyast.parse(text)
    except SyntaxError:
        return []
    assigned: list[str] = []
    reads_elsewhere: set[str] = set()
    reads_in_inputs: set[str] = set()
    for node in tree.body:
        target = _int_constant(node)
        if target is not None:
            assigned.append(target)
            continue
        reads = reads_in_inputs if _is_get_inputs(node) else reads_elsewhere
        reads.update(_names_read(node))
    return [name for name in assigned if name in reads_in_inputs and name not in reads_elsewhere]


def _int_constant(node: ast.stmt) -> str | None:
    """`name = 4096` at module level (a positive int, not a bool)."""
    if not isinstance(node, ast.Assign) or len(node.targets) != 1:
        return None
    target, value = node.targets[0], node.value
    if not isinstance(target, ast.Name) or not isinstance(value, ast.Constant):
        return None
    number = value.value
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        return None
    return target.id


def _is_get_inputs(node: ast.stmt) -> bool:
    return isinstance(node, ast.FunctionDef) and node.name == "get_inputs"


def _names_read(node: ast.AST) -> set[str]:
    return {
        child.id
        for child in ast.walk(node)
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load)
    }
