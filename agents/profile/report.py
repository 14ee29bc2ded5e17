"""The profiler's answer as typed, versioned JSON.

The language server's diagnostics and hovers and the planner read this, so it is a stable
schema (bump `SCHEMA_VERSION` on any incompatible change) that round-trips exactly.
Times are milliseconds per forward; shares are fractions of the profiled aten op time;
`pct_of_peak` is 0-100 of the ceiling that bounds the work.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from memory.profile_metrics import LineMetric, OpMetric, ProfileMetrics

SCHEMA_VERSION = 1
BOUNDS = ("memory", "compute", "overhead")


@dataclass
class Ceilings:
    """What this machine can do at best, measured once and cached (see ceilings.py)."""

    device: str  # "cpu" | "cuda"
    name: str  # hardware name: CPU model or GPU name
    threads: int
    memory_gbps: float  # bytes read + written per second by a large copy, in GB/s
    matmul_gflops: float  # fp32 matmul throughput
    bf16_gflops: float | None  # GPU only: bf16 matmul throughput
    measured_at: str  # ISO 8601, UTC
    tf32_gflops: float | None = None  # GPU only: fp32 matmul with TF32 tensor cores allowed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Ceilings:
        return cls(
            device=str(data["device"]),
            name=str(data["name"]),
            threads=int(data["threads"]),
            memory_gbps=float(data["memory_gbps"]),
            matmul_gflops=float(data["matmul_gflops"]),
            bf16_gflops=None if data.get("bf16_gflops") is None else float(data["bf16_gflops"]),
            measured_at=str(data["measured_at"]),
            tf32_gflops=_optional_float(data.get("tf32_gflops")),
        )


@dataclass
class OpStat:
    """One aten op (per line, or in total): its self time and its minimum cost."""

    name: str  # e.g. "aten::addmm"
    calls: int  # per forward
    time_ms: float  # self time per forward (device time on CUDA)
    share: float  # of the profiled op time, 0-1
    input_shapes: list[list[int]]  # tensor inputs of its first call
    dtype: str | None
    flops: int
    bytes: int  # each tensor input read once + each output written once
    intensity: float | None  # flops / byte; None when it moves no bytes
    bound: str  # one of BOUNDS
    pct_of_peak: float  # 100 * roofline time / time, capped at 100
    roofline_ms: float

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OpStat:
        return cls(
            name=str(data["name"]),
            calls=int(data["calls"]),
            time_ms=float(data["time_ms"]),
            share=float(data["share"]),
            input_shapes=[[int(d) for d in shape] for shape in data["input_shapes"]],
            dtype=data.get("dtype"),
            flops=int(data["flops"]),
            bytes=int(data["bytes"]),
            intensity=_optional_float(data.get("intensity")),
            bound=str(data["bound"]),
            pct_of_peak=float(data["pct_of_peak"]),
            roofline_ms=float(data["roofline_ms"]),
        )


@dataclass
class LineStat:
    """One source line of the user's file and the aten ops it issued."""

    file: str
    line: int
    function: str
    source: str  # the line's text, stripped
    time_ms: float
    share: float
    flops: int
    bytes: int
    intensity: float | None
    bound: str
    pct_of_peak: float
    roofline_ms: float  # max(compute time at peak, bytes / peak bandwidth)
    ops: list[OpStat] = field(default_factory=list)  # by time, descending

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LineStat:
        return cls(
            file=str(data["file"]),
            line=int(data["line"]),
            function=str(data["function"]),
            source=str(data["source"]),
            time_ms=float(data["time_ms"]),
            share=float(data["share"]),
            flops=int(data["flops"]),
            bytes=int(data["bytes"]),
            intensity=_optional_float(data.get("intensity")),
            bound=str(data["bound"]),
            pct_of_peak=float(data["pct_of_peak"]),
            roofline_ms=float(data["roofline_ms"]),
            ops=[OpStat.from_json(op) for op in data["ops"]],
        )


@dataclass
class Roofline:
    """The whole forward against the ceilings: what a perfect, fully fused rewrite needs.

    `bytes` counts inputs, parameters, buffers and outputs once (the fused minimum);
    `unfused_bytes` is the sum over ops, as PyTorch runs them now.
    """

    flops: int
    bytes: int
    unfused_bytes: int
    intensity: float | None
    compute_ms: float
    memory_ms: float
    bound_ms: float
    bound: str  # "memory" | "compute"
    pct_of_peak: float  # 100 * bound_ms / total_ms, capped at 100

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Roofline:
        return cls(
            flops=int(data["flops"]),
            bytes=int(data["bytes"]),
            unfused_bytes=int(data["unfused_bytes"]),
            intensity=_optional_float(data.get("intensity")),
            compute_ms=float(data["compute_ms"]),
            memory_ms=float(data["memory_ms"]),
            bound_ms=float(data["bound_ms"]),
            bound=str(data["bound"]),
            pct_of_peak=float(data["pct_of_peak"]),
        )


@dataclass
class Profile:
    """Where one problem's forward spends its time, line by line."""

    file: str
    device: str
    size: str
    threads: int
    repeat: int
    torch_version: str
    total_ms: float  # median wall time of one forward, profiler off
    op_ms: float  # aten op self time per forward under the profiler (the shares' base)
    attributed_ms: float  # the part of op_ms that landed on a line of `file`
    attributed_share: float  # attributed_ms / op_ms
    lines: list[LineStat]  # by time, descending
    ops: list[OpStat]  # per-op totals over the whole forward, by time, descending
    roofline: Roofline
    ceilings: Ceilings
    notes: list[str] = field(default_factory=list)  # caveats on how far to trust the numbers
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def metrics(self) -> ProfileMetrics:
        """What the skill gate (memory/gate.py) reads of this profile, in memory's own types."""
        return ProfileMetrics(
            device=self.device,
            bound=self.roofline.bound,
            pct_of_peak=self.roofline.pct_of_peak,
            ops=tuple(OpMetric(op.name, op.calls, op.share, op.dtype) for op in self.ops),
            lines=tuple(LineMetric(line.bound, line.share) for line in self.lines),
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Profile:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(f"profile schema version {version!r}, expected {SCHEMA_VERSION}")
        return cls(
            schema_version=int(version),
            file=str(data["file"]),
            device=str(data["device"]),
            size=str(data["size"]),
            threads=int(data["threads"]),
            repeat=int(data["repeat"]),
            torch_version=str(data["torch_version"]),
            total_ms=float(data["total_ms"]),
            op_ms=float(data["op_ms"]),
            attributed_ms=float(data["attributed_ms"]),
            attributed_share=float(data["attributed_share"]),
            lines=[LineStat.from_json(line) for line in data["lines"]],
            ops=[OpStat.from_json(op) for op in data["ops"]],
            roofline=Roofline.from_json(data["roofline"]),
            ceilings=Ceilings.from_json(data["ceilings"]),
            notes=[str(note) for note in data.get("notes", [])],
        )


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)
