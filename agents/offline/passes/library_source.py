"""Source-level fallback of library substitution, for forwards fx cannot trace (a Python
branch on a tensor, an assert on a shape): hand-written attention and softmax found with
`ast` in the forward's top-level statements and replaced as text. The statements a pattern
used up are deleted and its expression replaced; every other byte of the forward stays.

Names are followed only through plain `name = value` statements whose every use lies inside
the pattern, and a replacement may only mention names that still mean what they meant where
the hand-written code read them.
"""

from __future__ import annotations

import ast
import math
import textwrap
from dataclasses import dataclass, field
from typing import Any

import torch.nn as nn

from agents import pyast
from agents.offline import source as src
from agents.offline.passes.base import Program, Rewrite

_Call = tuple[ast.expr, list[ast.expr], dict[str, ast.expr]]  # (input, other args, kwargs)
_FUNCTIONS = ("torch", "F", "torch.nn.functional", "nn.functional")
_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_PURE_CALLS = {"math.sqrt", "float", "int", "torch.tril", "torch.triu", "torch.ones"}
_PURE_CALLS |= {"torch.ones_like", "torch.tensor"}
_PURE_METHODS = {"size", "dim", "bool", "logical_not", "tril", "triu", "view", "unsqueeze"}


@dataclass
class _Found:
    """One match: the expression to replace, its new text and the statements it used up."""

    expr: ast.expr
    text: str
    what: str
    target: str
    consumed: set[int] = field(default_factory=set)
    leaves: list[tuple[ast.expr, int]] = field(default_factory=list)  # (expr, statement)


def rewrite(program: Program, trace_error: str) -> Rewrite:
    """Rewrite the forward's text; `trace_error` says why fx could not do it."""
    try:
        parts = src.class_parts(program.source, program.class_name)
        body = _Body(textwrap.dedent(parts.methods["forward"]))
    except (src.SourceError, SyntaxError) as error:
        return Rewrite(None, f"{trace_error}; source fallback: {error}", method="source")
    functional = _functional_name(program.source, parts.prelude)
    found: list[tuple[int, _Found]] = []
    taken: set[int] = set()
    for index, stmt in enumerate(body.stmts):
        if index in taken or not isinstance(stmt, ast.Assign | ast.Return | ast.Expr):
            continue
        for expr in body.expressions(stmt):
            match = _attention(body, expr, index, functional, program.module) or _softmax(
                body, expr, index
            )
            if match is None or match.consumed & taken or not body.valid(match, index):
                continue
            found.append((index, match))
            taken |= match.consumed | {index}
            break
    if not found:
        reason = "the source fallback found no hand-written attention or softmax"
        return Rewrite(None, f"{trace_error}; {reason}", method="source")
    offset = _forward_line(program.source, program.class_name) - 1
    changes = [body.describe(index, match, offset) for index, match in found]
    forward = textwrap.indent(body.edited([m for _, m in found]), "    ")
    imports = ("import torch.nn.functional as F",) if functional == "F" else ()
    doc = ("library-substitution: " + "; ".join(changes)).replace('"""', "'''")[:300]
    source = src.build_module(parts, {"forward": forward}, doc=doc, imports=imports)
    return Rewrite(source, "; ".join(changes), changes, method="source")


class _Body:
    """The forward's statements with where each name is bound and read."""

    def __init__(self, text: str):
        self.text = text
        function = pyast.parse(text).body[0]
        if not isinstance(function, ast.FunctionDef):
            raise SyntaxError("forward is not a plain function")
        self.stmts = function.body
        self.parents: dict[ast.AST, ast.AST] = {}
        self.bound: dict[str, list[int]] = {}  # name -> statements that (re)bind it
        self.reads: list[tuple[int, ast.Name]] = []
        for index, stmt in enumerate(self.stmts):
            for node in ast.walk(stmt):
                for child in ast.iter_child_nodes(node):
                    self.parents[child] = node
                for name in _stored(node):
                    self.bound.setdefault(name, []).append(index)
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    self.reads.append((index, node))
        self.lines = text.splitlines(keepends=True)

    def expressions(self, stmt: ast.stmt) -> list[ast.expr]:
        """The statement's expressions, outermost first, outside lambdas/comprehensions."""
        nodes = [node for node in ast.walk(stmt) if isinstance(node, ast.expr)]
        return [n for n in nodes if not any(isinstance(a, _SCOPES) for a in self._up(n))]

    def _up(self, node: ast.AST) -> list[ast.AST]:
        chain = []
        while node in self.parents:
            node = self.parents[node]
            chain.append(node)
        return chain

    def binding(self, name: str, at: int, deleted: set[int] | None = None) -> int:
        """The statement whose binding of `name` is live at statement `at` (-1: none)."""
        earlier = [i for i in self.bound.get(name, []) if i < at and i not in (deleted or ())]
        return max(earlier, default=-1)

    def resolve(self, expr: ast.expr, at: int) -> tuple[ast.expr, int, list[int]]:
        """Follow names through plain `name = value` statements: (value, where, used up)."""
        chain: list[int] = []
        while isinstance(expr, ast.Name):
            j = self.binding(expr.id, at)
            stmt = self.stmts[j] if j >= 0 else None
            if not (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id == expr.id
            ):
                break
            chain.append(j)
            expr, at = stmt.value, j
        return expr, at, chain

    def valid(self, match: _Found, host: int) -> bool:
        """Every use of a used-up statement lies inside the pattern, each used-up statement
        has its lines to itself, and the replacement's names still mean the same."""
        inside = set(ast.walk(match.expr))
        for j in match.consumed:
            stmt = self.stmts[j]
            assert isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name)
            name = stmt.targets[0].id
            for index, node in self.reads:
                if node.id != name or self.binding(name, index) != j or index in match.consumed:
                    continue
                if not (index == host and node in inside):
                    return False
            if not self._own_lines(j):
                return False
        names = [
            (node.id, at)
            for leaf, at in match.leaves
            for node in ast.walk(leaf)
            if isinstance(node, ast.Name)
        ]
        return all(
            self.binding(name, at) == self.binding(name, host, match.consumed) for name, at in names
        )

    def _own_lines(self, j: int) -> bool:
        stmt = self.stmts[j]
        before = self.stmts[j - 1].end_lineno if j > 0 else 0
        after = self.stmts[j + 1].lineno if j + 1 < len(self.stmts) else None
        return (before or 0) < stmt.lineno and (after is None or after > (stmt.end_lineno or 0))

    def segment(self, expr: ast.expr) -> str:
        return ast.get_source_segment(self.text, expr) or ast.unparse(expr)

    def describe(self, host: int, match: _Found, offset: int) -> str:
        stmts = [self.stmts[i] for i in (*match.consumed, host)]
        first = min(s.lineno for s in stmts) + offset
        last = max(s.end_lineno or s.lineno for s in stmts) + offset
        where = f"line {first}" if first == last else f"line {first}-{last}"
        return f"{where}: hand-written {match.what} → {match.target}"

    def edited(self, matches: list[_Found]) -> str:
        """The forward with each match's expression replaced and its statements deleted."""
        data = self.text.encode()
        starts = [0]
        for line in self.lines:
            starts.append(starts[-1] + len(line.encode()))
        edits: list[tuple[int, int, str]] = []
        for match in matches:
            expr = match.expr
            begin = starts[expr.lineno - 1] + expr.col_offset
            end = starts[(expr.end_lineno or expr.lineno) - 1] + (expr.end_col_offset or 0)
            edits.append((begin, end, match.text))
            for j in match.consumed:
                stmt = self.stmts[j]
                last = stmt.end_lineno or stmt.lineno
                edits.append((starts[stmt.lineno - 1], starts[last], ""))
        for begin, end, text in sorted(edits, reverse=True):
            data = data[:begin] + text.encode() + data[end:]
        return data.decode()


def _stored(node: ast.AST) -> list[str]:
    """Names a node binds: assignment targets, loop/with targets, imports, nested defs."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
        return [node.id]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Import | ast.ImportFrom):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    if isinstance(node, ast.ExceptHandler) and node.name:
        return [node.name]
    if isinstance(node, ast.Global | ast.Nonlocal):
        return list(node.names)
    return []


def _dotted(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        base = _dotted(expr.value)
        return f"{base}.{expr.attr}" if base else None
    return None


def _call(expr: ast.expr, name: str) -> _Call | None:
    """`torch.name(x, ...)`, `F.name(x, ...)` or `x.name(...)`: (x, other args, kwargs)."""
    if not isinstance(expr, ast.Call) or not isinstance(expr.func, ast.Attribute):
        return None
    if expr.func.attr != name or any(isinstance(a, ast.Starred) for a in expr.args):
        return None
    kwargs = {k.arg: k.value for k in expr.keywords if k.arg}
    if len(kwargs) != len(expr.keywords):
        return None
    receiver = _dotted(expr.func.value)
    if receiver in ("math", "np", "numpy"):
        return None
    if receiver in _FUNCTIONS:
        if expr.args:
            return expr.args[0], list(expr.args[1:]), kwargs
        return (kwargs.pop("input"), [], kwargs) if "input" in kwargs else None
    return expr.func.value, list(expr.args), kwargs


def _argument(args: list[ast.expr], kwargs: dict[str, ast.expr], index: int, key: str):
    if len(args) > index:
        return args[index]
    return kwargs.get(key)


def _literal(expr: ast.expr | None) -> object:
    try:
        return ast.literal_eval(expr) if expr is not None else None
    except ValueError:
        return None


def _matmul(expr: ast.expr) -> tuple[ast.expr, ast.expr] | None:
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.MatMult):
        return expr.left, expr.right
    for name in ("matmul", "bmm"):
        found = _call(expr, name)
        if found and len(found[1]) == 1 and not found[2]:
            return found[0], found[1][0]
    return None


def _movable(expr: ast.expr) -> bool:
    """Can the expression be evaluated later without changing anything: names, attributes,
    constants, arithmetic, subscripts, math.sqrt/float/int and .size()/.dim()."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            method = isinstance(node.func, ast.Attribute) and node.func.attr in _PURE_METHODS
            if name not in _PURE_CALLS and not method:
                return False
        elif isinstance(node, ast.NamedExpr | ast.Await | ast.Yield | ast.YieldFrom | ast.Lambda):
            return False
    return True


class _Walk:
    """Follows names to their values, remembering the statements it used up."""

    def __init__(self, body: _Body):
        self.body = body
        self.consumed: set[int] = set()

    def follow(self, expr: ast.expr, at: int) -> tuple[ast.expr, int]:
        value, where, chain = self.body.resolve(expr, at)
        self.consumed.update(chain)
        return value, where

    def peek(self, expr: ast.expr, at: int) -> ast.expr:
        return self.body.resolve(expr, at)[0]


def _attention(
    body: _Body, expr: ast.expr, host: int, functional: str, module: Any
) -> _Found | None:
    """softmax(q @ k.transpose(-2, -1) / c (masked_fill(cond, -inf)), dim=-1) @ v, with an
    optional dropout(p=0) → scaled_dot_product_attention(q, k, v, attn_mask=not cond)."""
    pv = _matmul(expr)
    if pv is None:
        return None
    walk = _Walk(body)
    p, at = walk.follow(pv[0], host)
    inside = _no_dropout(p, module)
    if inside is not None:
        p, at = walk.follow(inside, at)
    soft = _call(p, "softmax")
    if soft is None or set(soft[2]) - {"dim"} or len(soft[1]) > 1:
        return None
    if _literal(_argument(soft[1], soft[2], 0, "dim")) != -1:
        return None
    scores, at_s = walk.follow(soft[0], at)
    leaves: list[tuple[ast.expr, int]] = []
    cond: ast.expr | None = None
    mask = _masked(walk, scores, at_s)
    if mask is not None:
        (cond, at_mask), (scores, at_s) = mask
        leaves.append((cond, at_mask))
    scale: tuple[str, ast.expr, int] | None = None
    if isinstance(scores, ast.BinOp) and isinstance(scores.op, ast.Div | ast.Mult):
        op = "div" if isinstance(scores.op, ast.Div) else "mul"
        sides = [(scores.left, scores.right)]
        sides += [(scores.right, scores.left)] if op == "mul" else []
        side = next((pair for pair in sides if _scoreish(walk.peek(pair[0], at_s))), None)
        if side is None or not _movable(side[1]):
            return None
        scale = (op, side[1], at_s)
        leaves.append((side[1], at_s))
        scores, at_s = walk.follow(side[0], at_s)
        mask = _masked(walk, scores, at_s) if cond is None else None
        if mask is not None:
            if not _positive(side[1]):
                return None  # -inf / c stays -inf only for c > 0
            (cond, at_mask), (scores, at_s) = mask
            leaves.append((cond, at_mask))
    pair = _matmul(scores)
    kt = walk.follow(pair[1], at_s) if pair else None
    k = _untransposed(kt[0]) if kt else None
    if pair is None or kt is None or k is None:
        return None
    q, v = pair[0], pv[1]
    names = [(q, at_s), (k, kt[1]), (v, host)]
    if any(not isinstance(leaf, ast.Name) for leaf, _ in names) or not all(
        _movable(leaf) for leaf, _ in leaves
    ):
        return None
    args = [body.segment(q), body.segment(k), body.segment(v)]
    if cond is not None:
        args.append(f"attn_mask={_negated(body, cond)}")
    if scale is None:
        args.append("scale=1.0")
    elif not _default_scale(body, scale, (q, at_s), (k, kt[1])):
        c = body.segment(scale[1])
        simple = isinstance(scale[1], ast.Name | ast.Attribute | ast.Call | ast.Constant)
        c = c if simple else f"({c})"
        args.append(f"scale=1.0 / {c}" if scale[0] == "div" else f"scale={c}")
    what = "attention softmax(q @ kᵀ · scale) @ v" + (" with a mask" if cond else "")
    return _Found(
        expr,
        f"{functional}.scaled_dot_product_attention({', '.join(args)})",
        what,
        "F.scaled_dot_product_attention",
        walk.consumed,
        [*names, *leaves],
    )


def _scoreish(expr: ast.expr) -> bool:
    return _matmul(expr) is not None or _call(expr, "masked_fill") is not None


def _masked(
    walk: _Walk, expr: ast.expr, at: int
) -> tuple[tuple[ast.expr, int], tuple[ast.expr, int]] | None:
    """((cond, where), (scores, where)) for scores.masked_fill(cond, -inf)."""
    found = _call(expr, "masked_fill")
    if found is None or set(found[2]) - {"mask", "value"} or len(found[1]) > 2:
        return None
    cond = _argument(found[1], found[2], 0, "mask")
    value = _argument(found[1], found[2], 1, "value")
    if cond is None or not _minus_infinity(value):
        return None
    return (cond, at), walk.follow(found[0], at)


def _minus_infinity(expr: ast.expr | None) -> bool:
    """float("-inf"), -float("inf"), -math.inf, -torch.inf."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = expr.operand
        if _dotted(inner) in ("math.inf", "torch.inf"):
            return True
        return _float_of(inner) == math.inf
    return _float_of(expr) == -math.inf


def _float_of(expr: ast.expr | None) -> float | None:
    if isinstance(expr, ast.Call) and _dotted(expr.func) == "float" and len(expr.args) == 1:
        text = _literal(expr.args[0])
        if isinstance(text, str) and text.strip().lower() in ("inf", "-inf", "+inf"):
            return float(text)
    return None


def _negated(body: _Body, cond: ast.expr) -> str:
    """The text of `not cond`: `a != b` for `a == b`, else `(cond).logical_not()`."""
    if isinstance(cond, ast.Compare) and len(cond.ops) == 1:
        flipped = {ast.Eq: "!=", ast.NotEq: "=="}.get(type(cond.ops[0]))
        if flipped:
            return f"{body.segment(cond.left)} {flipped} {body.segment(cond.comparators[0])}"
    return f"({body.segment(cond)}).logical_not()"


def _positive(c: ast.expr) -> bool:
    """math.sqrt(..), 1 / math.sqrt(..), n ** ±0.5 or a positive number."""
    value = _literal(c)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value > 0
    if isinstance(c, ast.Call):
        return _dotted(c.func) == "math.sqrt"
    if isinstance(c, ast.BinOp) and isinstance(c.op, ast.Pow):
        return _literal(c.right) in (0.5, -0.5)
    if isinstance(c, ast.BinOp) and isinstance(c.op, ast.Div):
        return _positive(c.left) and _positive(c.right)
    return False


def _no_dropout(expr: ast.expr, module: Any) -> ast.expr | None:
    """x for `self.drop(x)` (an nn.Dropout(p=0) or nn.Identity submodule) or
    `F.dropout(x, p=0.0)`, else None."""
    if not isinstance(expr, ast.Call) or len(expr.args) < 1:
        return None
    name = _dotted(expr.func) or ""
    if name.startswith("self.") and len(expr.args) == 1 and not expr.keywords:
        target = module
        for part in name.split(".")[1:]:
            target = getattr(target, part, None)
        if isinstance(target, nn.Identity) or (
            isinstance(target, nn.Dropout) and target.p == 0 and type(target) is nn.Dropout
        ):
            return expr.args[0]
        return None
    found = _call(expr, "dropout")
    if found is None or set(found[2]) - {"p", "training", "inplace"}:
        return None
    if _literal(_argument(found[1], found[2], 0, "p")) == 0 and not _literal(
        found[2].get("inplace")
    ):
        return found[0]
    return None


def _untransposed(expr: ast.expr) -> ast.expr | None:
    """k for `k.transpose(-2, -1)`, `k.transpose(-1, -2)`, `torch.transpose(k, -2, -1)`,
    `k.mT`."""
    if isinstance(expr, ast.Attribute) and expr.attr == "mT":
        return expr.value
    found = _call(expr, "transpose")
    if found is None or found[2] or len(found[1]) != 2:
        return None
    dims = {_literal(a) for a in found[1]}
    return found[0] if dims == {-2, -1} else None


def _default_scale(
    body: _Body,
    scale: tuple[str, ast.expr, int],
    *leaves: tuple[ast.expr, int],
) -> bool:
    """The scale is 1/math.sqrt(q.size(-1)) (or k's, or .shape[-1]): SDPA's default."""
    op, c, at = scale
    reciprocal = isinstance(c, ast.BinOp) and isinstance(c.op, ast.Div)
    if op == "mul" and reciprocal and _literal(c.left) in (1, 1.0):  # type: ignore[attr-defined]
        op, c = "div", c.right  # type: ignore[attr-defined]
    if op != "div" or not isinstance(c, ast.Call) or _dotted(c.func) != "math.sqrt":
        return False
    if len(c.args) != 1 or c.keywords:
        return False
    n = c.args[0]
    source: ast.expr | None = None
    found = _call(n, "size")
    if found and len(found[1]) == 1 and not found[2] and _literal(found[1][0]) == -1:
        source = found[0]
    elif (
        isinstance(n, ast.Subscript)
        and _literal(n.slice) == -1
        and isinstance(n.value, ast.Attribute)
        and n.value.attr == "shape"
    ):
        source = n.value.value
    if not isinstance(source, ast.Name):
        return False
    return any(
        isinstance(leaf, ast.Name)
        and source.id == leaf.id
        and body.binding(source.id, at) == body.binding(leaf.id, leaf_at)
        for leaf, leaf_at in leaves
    )


def _softmax(body: _Body, expr: ast.expr, host: int) -> _Found | None:
    """exp(y) / sum(exp(y), dim=d, keepdim=True), y optionally x - max(x, d, keepdim)[0] →
    torch.softmax(x, dim=d)."""
    if not isinstance(expr, ast.BinOp) or not isinstance(expr.op, ast.Div):
        return None
    consumed: set[int] = set()
    e, at_e, chain_e = body.resolve(expr.left, host)
    total, at_t, chain_t = body.resolve(expr.right, host)
    exp = _call(e, "exp")
    red = _reduction(total, "sum")
    if exp is None or exp[1] or exp[2] or red is None or not red[2]:
        return None
    e2, at_e2, chain_e2 = body.resolve(red[0], at_t)
    if ast.dump(e2) != ast.dump(e) or at_e2 != at_e:
        return None
    consumed.update(chain_e + chain_t + chain_e2)
    dim = red[1]
    y, at_y, chain_y = body.resolve(exp[0], at_e)
    leaf, leaf_at = exp[0], at_e
    shifted = _shift(y, dim)
    if shifted is not None:
        consumed.update(chain_y)
        leaf, leaf_at = shifted, at_y
    if not _movable(leaf):
        return None
    return _Found(
        expr,
        f"torch.softmax({body.segment(leaf)}, dim={dim})",
        f"softmax over dim {dim}",
        "torch.softmax",
        consumed,
        [(leaf, leaf_at)],
    )


def _reduction(expr: ast.expr, name: str) -> tuple[ast.expr, int, bool] | None:
    """(input, dim, keepdim) of `torch.name(x, dim=d, keepdim=k)` / `x.name(d, k)`."""
    found = _call(expr, name)
    if found is None or set(found[2]) - {"dim", "keepdim"} or len(found[1]) > 2:
        return None
    dim = _literal(_argument(found[1], found[2], 0, "dim"))
    keepdim = _literal(_argument(found[1], found[2], 1, "keepdim"))
    if not isinstance(dim, int) or isinstance(dim, bool) or keepdim not in (True, False, None):
        return None
    return found[0], dim, bool(keepdim)


def _shift(y: ast.expr, dim: int) -> ast.expr | None:
    """x when y is x - max(x, dim, keepdim=True)[0] (or .values, or amax)."""
    if not isinstance(y, ast.BinOp) or not isinstance(y.op, ast.Sub):
        return None
    x, m = y.left, y.right
    if isinstance(m, ast.Subscript) and _literal(m.slice) == 0:
        m = m.value
        red = _reduction(m, "max")
    elif isinstance(m, ast.Attribute) and m.attr == "values":
        red = _reduction(m.value, "max")
    else:
        red = _reduction(m, "amax")
    if red is None or red[1] != dim or not red[2] or ast.dump(red[0]) != ast.dump(x):
        return None
    return x


def _functional_name(source: str, prelude: str) -> str:
    """How the replacement spells torch.nn.functional: F when the module imports it so,
    or when the name F is free (the import is added); else in full."""
    lines = {line.strip() for line in prelude.splitlines()}
    if lines & {"import torch.nn.functional as F", "from torch.nn import functional as F"}:
        return "F"
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return "torch.nn.functional"
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    names |= {alias.asname or alias.name for node in imports for alias in node.names}
    return "torch.nn.functional" if "F" in names else "F"


def _forward_line(source: str, class_name: str) -> int:
    """The first line (decorators included) of the class's forward in `source`."""
    for node in ast.walk(pyast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return min([item.lineno, *(d.lineno for d in item.decorator_list)])
    return 1
