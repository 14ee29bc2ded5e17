"""The profile as a terminal table: hot lines first, their top ops under each.

The console comes from agents.display.make_console: a terminal's width on a tty, and no
wrapping at 80 columns in a pipe or a log (one table row per line there)."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agents.display import plural
from agents.profile.report import OpStat, Profile

HOT_LINES = 10
OPS_PER_LINE = 3
BOUND_STYLES = {"memory": "cyan", "compute": "magenta", "overhead": "yellow"}


def render_profile(profile: Profile, console: Console) -> None:
    console.print(header(profile))
    console.print(lines_table(profile))
    for note in profile.notes:
        console.print(f"note: {note}", style="yellow")


def header(profile: Profile) -> Text:
    roof, ceil = profile.roofline, profile.ceilings
    bf16 = f", bf16 matmul {ceil.bf16_gflops:,.0f} GFLOP/s" if ceil.bf16_gflops else ""
    if ceil.tf32_gflops:
        bf16 = f", tf32 matmul {ceil.tf32_gflops:,.0f} GFLOP/s{bf16}"
    text = Text()
    text.append(profile.file, style="bold")
    threads = plural(profile.threads, "thread")
    text.append(f"  ({profile.device}, size {profile.size}, {threads})\n")
    text.append(
        f"forward {profile.total_ms:.3f} ms (median); aten ops {profile.op_ms:.3f} ms, "
        f"{profile.attributed_share:.1%} attributed to source lines\n"
    )
    text.append(
        f"whole model: {_si(roof.flops, 'FLOP')}, {_si(roof.bytes, 'B')} fused minimum "
        f"({_si(roof.unfused_bytes, 'B')} as run); {roof.bound}-bound, best "
        f"{roof.bound_ms:.3f} ms = {roof.pct_of_peak:.1f}% of peak\n"
    )
    text.append(
        f"ceilings ({ceil.name}): memory {ceil.memory_gbps:,.1f} GB/s, "
        f"fp32 matmul {ceil.matmul_gflops:,.0f} GFLOP/s{bf16}; measured {ceil.measured_at}",
        style="dim",
    )
    return text


def lines_table(profile: Profile, hot: int = HOT_LINES) -> Table:
    """A row per hot line, then its top ops: name, shapes, ms, FLOPs, bytes, intensity."""
    table = Table(title="Hot lines", title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("line", "share", "ms", "bound", "% peak", "FLOP/B"):
        table.add_column(name, justify="left" if name == "bound" else "right", no_wrap=True)
    table.add_column("source / aten op", overflow="fold", min_width=20)
    for line in profile.lines[:hot]:
        source = Text(line.source, style="bold")
        source.append(f"  {_si(line.flops, 'FLOP')}, {_si(line.bytes, 'B')}", style="dim")
        table.add_row(
            str(line.line),
            f"{line.share:.1%}",
            f"{line.time_ms:.3f}",
            Text(line.bound, style=BOUND_STYLES.get(line.bound, "")),
            f"{line.pct_of_peak:.1f}",
            _intensity(line.intensity),
            source,
        )
        for op in line.ops[:OPS_PER_LINE]:
            table.add_row(
                "",
                "",
                f"{op.time_ms:.3f}",
                "",
                "",
                _intensity(op.intensity),
                f"  {op.name} {_shapes(op)}  {_si(op.flops, 'FLOP')}, {_si(op.bytes, 'B')}",
                style="dim",
            )
    return table


def _shapes(op: OpStat) -> str:
    return " ".join("x".join(map(str, shape)) or "scalar" for shape in op.input_shapes)


def _si(value: int, unit: str) -> str:
    """134217728 -> '134.2 MFLOP': readable from tiny ops to whole models."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.1f} {prefix}{unit}"
    return f"{value} {unit}"


def _intensity(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
