"""The fused epilogue as Triton code: one statement per step, on the fp32 accumulator tile.

Values are `v0` (the accumulator, BLOCK_M x BLOCK_N), `v1`, ...; a row reduction gives a
(BLOCK_M, 1) value that broadcasts against tiles like torch's keepdim result. Tensor operands
are loaded once with the tile's bounds mask; scalars are kernel arguments (read from the
module at call time); constants are written as they appear in the source.

Formulas follow PyTorch's in fp32 and use only tl.exp, tl.log and tl.math.erf, which both
the GPU compiler and the CPU interpreter (the no-GPU tests) implement: tanh is Cephes' tanhf
and log1p Goldberg's correction (the helpers in triton_gemm_kernel). Ops keep PyTorch's NaN
behaviour (relu and clamp pass NaN through; `tl.where` on a comparison does, tl.maximum may
not).
"""

from __future__ import annotations

from collections.abc import Callable

from agents.offline.passes.triton_gemm_match import Ref, Step

_INF = 'float("inf")'


def _const(value: float) -> str:
    if value != value:
        return 'float("nan")'
    if value in (float("inf"), -float("inf")):
        return _INF if value > 0 else f"-{_INF}"
    return repr(float(value))


def operand(ref: Ref) -> str:
    if ref.kind == "value":
        return f"v{ref.index}"
    if ref.kind == "tensor":
        return f"t{ref.index}"
    if ref.kind == "scalar":
        return f"s{ref.index}"
    return _const(ref.const)


def _tanh(x: str) -> str:
    return f"_tgemm_tanh({x})"


def _clamp(x: str, low: str, high: str) -> str:
    """min(max(x, low), high) as PyTorch orders it (low > high gives high), NaN kept."""
    inner = f"tl.where({x} < {low}, {low}, {x})"
    return f"tl.where({inner} > {high}, {high}, {inner})"


def _gelu(x: str, option: str) -> str:
    if option == "tanh":
        inner = f"0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x})"
        return f"0.5 * {x} * (1.0 + {_tanh(inner)})"
    return f"0.5 * {x} * (1.0 + tl.math.erf({x} * 0.7071067811865476))"


def _softplus(x: str, beta: str, threshold: str) -> str:
    """PyTorch's: x where x * beta > threshold, else log1p(exp(x * beta)) / beta."""
    soft = f"_tgemm_log1p(tl.exp({x} * {beta})) / {beta}"
    return f"tl.where({x} * {beta} > {threshold}, {x}, {soft})"


Formula = Callable[[list[str], str], str]
ELEMENTWISE: dict[str, Formula] = {
    "add": lambda a, _: f"{a[0]} + {a[1]}",  # operands are names or constants: no brackets
    "sub": lambda a, _: f"{a[0]} - {a[1]}",
    "mul": lambda a, _: f"{a[0]} * {a[1]}",
    "div": lambda a, _: f"{a[0]} / {a[1]}",
    "neg": lambda a, _: f"-{a[0]}",
    "abs": lambda a, _: f"tl.abs({a[0]})",
    "exp": lambda a, _: f"tl.exp({a[0]})",
    "square": lambda a, _: f"{a[0]} * {a[0]}",
    "relu": lambda a, _: f"tl.where({a[0]} < 0.0, 0.0, {a[0]})",
    "sigmoid": lambda a, _: f"1.0 / (1.0 + tl.exp(-{a[0]}))",
    "silu": lambda a, _: f"{a[0]} / (1.0 + tl.exp(-{a[0]}))",
    "tanh": lambda a, _: _tanh(a[0]),
    "gelu": lambda a, option: _gelu(a[0], option),
    "mish": lambda a, _: f"{a[0]} * {_tanh(f'_tgemm_log1p(tl.exp({a[0]}))')}",
    "softplus": lambda a, _: _softplus(a[0], a[1], a[2]),
    "leaky_relu": lambda a, _: f"tl.where({a[0]} > 0.0, {a[0]}, {a[0]} * {a[1]})",
    "clamp": lambda a, _: _clamp(a[0], a[1], a[2]),
    "clamp_min": lambda a, _: f"tl.where({a[0]} < {a[1]}, {a[1]}, {a[0]})",
    "hardsigmoid": lambda a, _: f"{_clamp(f'{a[0]} + 3.0', '0.0', '6.0')} / 6.0",
    "hardswish": lambda a, _: f"{a[0]} * {_clamp(f'{a[0]} + 3.0', '0.0', '6.0')} / 6.0",
}
"""op -> the expression of its value from its operands' expressions (and its option)."""


def _row(step: Step, x: str, out: str) -> list[str]:
    """A reduction over the row (the GEMM's output dim, all of it inside this tile): lanes
    past N hold the neutral value, so they change nothing."""
    live = f"tl.where(cols < N, {x}, {{}})"
    if step.op in ("sum", "mean"):
        total = f"tl.sum({live.format('0.0')}, axis=1, keep_dims=True)"
        return [f"{out} = {total}" + (" / N" if step.op == "mean" else "")]
    top = f"tl.max({live.format('-' + _INF)}, axis=1, keep_dims=True)"
    if step.op == "amax":
        return [f"{out} = {top}"]
    lines = [f"{out}_max = {top}"]
    if step.op == "logsumexp":  # torch shifts by 0 where the max is infinite
        lines.append(f"{out}_max = tl.where(tl.abs({out}_max) == {_INF}, 0.0, {out}_max)")
    lines.append(f"{out}_exp = tl.where(cols < N, tl.exp({x} - {out}_max), 0.0)")
    lines.append(f"{out}_sum = tl.sum({out}_exp, axis=1, keep_dims=True)")
    final = {
        "softmax": f"{out}_exp / {out}_sum",
        "log_softmax": f"{x} - {out}_max - tl.log({out}_sum)",
        "logsumexp": f"{out}_max + tl.log({out}_sum)",
    }[step.op]
    return [*lines, f"{out} = {final}"]


ROW_STEPS = ("softmax", "log_softmax", "logsumexp", "sum", "mean", "amax")
OPS = (*ELEMENTWISE, *ROW_STEPS)


def epilogue_lines(steps: tuple[Step, ...], tensors: int) -> list[str]:
    """The kernel's statements after the K loop, up to (not including) the store."""
    lines = [
        f"t{i} = tl.load(t{i}_ptr + batch * t{i}_sb + rows * t{i}_sm + cols * t{i}_sn, "
        "mask=in_bounds, other=0.0)"
        for i in range(tensors)
    ]
    for number, step in enumerate(steps, start=1):
        args = [operand(ref) for ref in step.args]
        out = f"v{number}"
        if step.op in ROW_STEPS:
            lines += _row(step, args[0], out)
        elif step.op in ELEMENTWISE:
            lines.append(f"{out} = {ELEMENTWISE[step.op](args, step.option)}")
        else:
            raise ValueError(f"no Triton formula for the epilogue op {step.op!r}")
    return lines


def needs_row_tile(steps: tuple[Step, ...]) -> bool:
    """Whether a step reduces over the row, so one tile must span the GEMM's output dim."""
    return any(step.op in ROW_STEPS for step in steps)
