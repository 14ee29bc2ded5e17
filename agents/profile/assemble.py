"""Join profiler times with op costs into per-line and per-op statistics.

Both sides are keyed by (user line, aten op name): the profiler gives self times over
`repeat` forwards, the cost recorder gives FLOPs and bytes of one forward. The cost recorder
sees the ops the user's code dispatched (aten::convolution); the profiler also sees the ops
those run internally (aten::mkldnn_convolution), so an internal op's self time is folded
into the outermost op of its call chain that has a cost. Op time that found no user line
stays in the denominator of every share, so the attributed share is honest.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import torch

from agents.profile.costs import OpCost, classify, compute_ms, memory_ms
from agents.profile.lines import LineKey
from agents.profile.report import Ceilings, LineStat, OpStat, Profile, Roofline

Key = tuple[LineKey | None, str]
PROFILER_INFLATION = 1.5
"""On CPU, op time above this multiple of the plain forward means profiling overhead shows."""
GPU_BUSY = 0.5
"""On CUDA, device time below this share of the wall time means the GPU mostly waits."""


@dataclass
class OpSample:
    """One timed aten event from the profiler."""

    line: LineKey | None
    name: str
    self_ms: float
    input_shapes: list
    callers: tuple[str, ...] = ()  # enclosing aten ops inside the line's range, outermost first


@dataclass
class _Group:
    """Everything known about one op name on one line (or in total)."""

    name: str
    samples: int = 0
    time_ms: float = 0.0  # summed over all profiled forwards
    cost_calls: int = 0
    flops: int = 0
    bytes: int = 0
    compute_ms: float = 0.0
    dtype: str | None = None
    input_shapes: list[list[int]] | None = None
    profiler_shapes: list[list[int]] = field(default_factory=list)

    def add_sample(self, sample: OpSample) -> None:
        if not self.samples:
            self.profiler_shapes = _flat_shapes(sample.input_shapes)
        self.samples += 1
        self.time_ms += sample.self_ms

    def add_cost(self, cost: OpCost, ceilings: Ceilings) -> None:
        if self.input_shapes is None:
            self.input_shapes, self.dtype = cost.input_shapes, cost.dtype
        self.cost_calls += 1
        self.flops += cost.flops
        self.bytes += cost.bytes
        self.compute_ms += compute_ms(cost.flops, cost.ceiling, ceilings)

    def merge(self, other: _Group) -> None:
        if self.input_shapes is None:
            self.input_shapes, self.dtype = other.input_shapes, other.dtype
        if not self.profiler_shapes:
            self.profiler_shapes = other.profiler_shapes
        self.samples += other.samples
        self.time_ms += other.time_ms
        self.cost_calls += other.cost_calls
        self.flops += other.flops
        self.bytes += other.bytes
        self.compute_ms += other.compute_ms


def assemble(
    samples: list[OpSample],
    costs: list[tuple[LineKey | None, OpCost]],
    *,
    repeat: int,
    total_ms: float,
    fused_bytes: int,
    ceilings: Ceilings,
    file: str,
    device: str,
    size: str,
    threads: int,
    source_lines: list[str] | None = None,
    notes: list[str] | None = None,
) -> Profile:
    groups: dict[Key, _Group] = {}
    costed: dict[LineKey | None, set[str]] = defaultdict(set)
    for line, cost in costs:
        _group(groups, line, cost.name).add_cost(cost, ceilings)
        costed[line].add(cost.name)
    for sample in samples:
        names = costed[sample.line]
        owner = next((n for n in (*sample.callers, sample.name) if n in names), sample.name)
        _group(groups, sample.line, owner).add_sample(sample)

    op_ms = sum(group.time_ms for group in groups.values()) / repeat
    attributed_ms = sum(g.time_ms for (line, _), g in groups.items() if line is not None) / repeat
    build = _Builder(repeat, op_ms, ceilings, device)

    by_line: dict[LineKey, list[_Group]] = defaultdict(list)
    totals: dict[str, _Group] = {}
    for (line, name), group in groups.items():
        if line is not None:
            by_line[line].append(group)
        totals.setdefault(name, _Group(name)).merge(group)

    lines = [
        build.line(key, members, file, _source(key.line, file, source_lines))
        for key, members in by_line.items()
    ]
    lines.sort(key=lambda line: (-line.time_ms, line.line))
    ops = sorted((build.op(group) for group in totals.values()), key=_op_order)
    return Profile(
        file=file,
        device=device,
        size=size,
        threads=threads,
        repeat=repeat,
        torch_version=torch.__version__,
        total_ms=_ms(total_ms),
        op_ms=_ms(op_ms),
        attributed_ms=_ms(attributed_ms),
        attributed_share=round(attributed_ms / op_ms, 6) if op_ms > 0 else 0.0,
        lines=lines,
        ops=ops,
        roofline=_roofline(groups.values(), fused_bytes, total_ms, ceilings),
        ceilings=ceilings,
        notes=[*(notes or []), *_caveats(op_ms, total_ms, device)],
    )


def _caveats(op_ms: float, total_ms: float, device: str) -> list[str]:
    """Say when the profiled op time and the plain wall time disagree, and what that means."""
    if total_ms <= 0 or op_ms <= 0:
        return []
    ratio = op_ms / total_ms
    if device == "cpu" and ratio > PROFILER_INFLATION:
        return [
            f"op time under the profiler is {ratio:.1f}x the plain forward: the ops are so short "
            "that profiling overhead inflates their times; trust shares more than milliseconds"
        ]
    if device == "cuda" and ratio < GPU_BUSY:
        return [
            f"the GPU is busy for only {ratio:.0%} of the forward's wall time: launch and host "
            "overhead dominate (fewer, larger kernels or CUDA graphs would help)"
        ]
    return []


def _group(groups: dict[Key, _Group], line: LineKey | None, name: str) -> _Group:
    group = groups.get((line, name))
    if group is None:
        group = groups[(line, name)] = _Group(name)
    return group


class _Builder:
    """Turns groups into OpStat and LineStat with times per forward and verdicts."""

    def __init__(self, repeat: int, op_ms: float, ceilings: Ceilings, device: str):
        self.repeat, self.op_ms, self.ceilings, self.device = repeat, op_ms, ceilings, device

    def op(self, group: _Group) -> OpStat:
        time_ms = group.time_ms / self.repeat
        # Folded internal ops make profiler samples overcount calls; the cost pass does not.
        calls = group.cost_calls or round(group.samples / self.repeat)
        memory = memory_ms(group.bytes, self.ceilings)
        moves = group.bytes > 0 or group.flops > 0
        verdict = classify(time_ms, group.compute_ms, memory, calls if moves else 0, self.device)
        return OpStat(
            name=group.name,
            calls=calls,
            time_ms=_ms(time_ms),
            share=self._share(time_ms),
            input_shapes=group.input_shapes or group.profiler_shapes,
            dtype=group.dtype,
            flops=group.flops,
            bytes=group.bytes,
            intensity=_intensity(group.flops, group.bytes),
            bound=verdict.bound,
            pct_of_peak=round(verdict.pct_of_peak, 2),
            roofline_ms=_ms(verdict.roofline_ms),
        )

    def line(self, key: LineKey, members: list[_Group], file: str, source: str) -> LineStat:
        ops = sorted((self.op(group) for group in members), key=_op_order)
        time_ms = sum(group.time_ms for group in members) / self.repeat
        flops = sum(group.flops for group in members)
        nbytes = sum(group.bytes for group in members)
        compute = sum(group.compute_ms for group in members)
        kernels = sum(op.calls for op in ops if op.bytes or op.flops)
        verdict = classify(time_ms, compute, memory_ms(nbytes, self.ceilings), kernels, self.device)
        return LineStat(
            file=file,
            line=key.line,
            function=key.function,
            source=source,
            time_ms=_ms(time_ms),
            share=self._share(time_ms),
            flops=flops,
            bytes=nbytes,
            intensity=_intensity(flops, nbytes),
            bound=verdict.bound,
            pct_of_peak=round(verdict.pct_of_peak, 2),
            roofline_ms=_ms(verdict.roofline_ms),
            ops=ops,
        )

    def _share(self, time_ms: float) -> float:
        return round(time_ms / self.op_ms, 6) if self.op_ms > 0 else 0.0


def _roofline(groups, fused_bytes: int, total_ms: float, ceilings: Ceilings) -> Roofline:
    groups = list(groups)
    flops = sum(group.flops for group in groups)
    compute = sum(group.compute_ms for group in groups)
    memory = memory_ms(fused_bytes, ceilings)
    bound_ms = max(compute, memory)
    return Roofline(
        flops=flops,
        bytes=fused_bytes,
        unfused_bytes=sum(group.bytes for group in groups),
        intensity=_intensity(flops, fused_bytes),
        compute_ms=_ms(compute),
        memory_ms=_ms(memory),
        bound_ms=_ms(bound_ms),
        bound="compute" if compute > memory else "memory",
        pct_of_peak=round(min(100.0, 100.0 * bound_ms / total_ms), 2) if total_ms > 0 else 0.0,
    )


def _source(line: int, file: str, source_lines: list[str] | None) -> str:
    if source_lines is None:
        import linecache

        return linecache.getline(file, line).strip()
    return source_lines[line - 1].strip() if 0 < line <= len(source_lines) else ""


def _flat_shapes(shapes: list) -> list[list[int]]:
    """Profiler shapes of plain tensor arguments (lists of ints); tensor lists are skipped."""
    return [
        list(shape)
        for shape in shapes
        if isinstance(shape, list | tuple) and shape and all(isinstance(d, int) for d in shape)
    ]


def _op_order(op: OpStat) -> tuple:
    return (-op.time_ms, -op.flops, op.name)


def _intensity(flops: int, nbytes: int) -> float | None:
    return round(flops / nbytes, 4) if nbytes > 0 else None


def _ms(value: float) -> float:
    return round(value, 6)
