"""A roofline chart: where each hot line, and the whole model, sits against the ceilings."""

from __future__ import annotations

from pathlib import Path

from agents.profile.report import Profile

HOT_LINES = 10


def plot_roofline(profile: Profile, path: str | Path) -> Path:
    """Save a log-log roofline PNG: x = FLOPs per byte, y = achieved GFLOP/s."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # no global backend switch
    from matplotlib.figure import Figure

    ceil = profile.ceilings
    points = [
        (f"L{line.line}", line.intensity, line.flops / (line.time_ms * 1e6))
        for line in profile.lines[:HOT_LINES]
        if line.intensity and line.flops > 0 and line.time_ms > 0
    ]
    roof = profile.roofline
    model = None
    if roof.intensity and roof.flops > 0 and profile.total_ms > 0:
        model = ("model", roof.intensity, roof.flops / (profile.total_ms * 1e6))
    everything = [*points, model] if model else points
    ridge = ceil.matmul_gflops / ceil.memory_gbps
    low = min([p[1] for p in everything] + [ridge]) / 10
    high = max([p[1] for p in everything] + [ridge]) * 10
    xs = [low * (high / low) ** (i / 200) for i in range(201)]

    figure = Figure(figsize=(7, 4.5), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    peaks = [("fp32 matmul", ceil.matmul_gflops, "tab:red")]
    if ceil.tf32_gflops:
        peaks.append(("tf32 matmul", ceil.tf32_gflops, "tab:orange"))
    if ceil.bf16_gflops:
        peaks.append(("bf16 matmul", ceil.bf16_gflops, "tab:purple"))
    for label, peak, color in peaks:
        axes.plot(xs, [min(peak, ceil.memory_gbps * x) for x in xs], color=color, label=label)
    axes.plot(
        xs,
        [ceil.memory_gbps * x for x in xs],
        color="tab:blue",
        linestyle=":",
        label=f"memory {ceil.memory_gbps:,.0f} GB/s",
    )
    for label, intensity, achieved in points:
        axes.scatter([intensity], [achieved], color="black", zorder=3)
        axes.annotate(label, (intensity, achieved), textcoords="offset points", xytext=(4, 4))
    if model:
        label, intensity, achieved = model
        axes.scatter([intensity], [achieved], marker="*", s=140, color="tab:green", zorder=3)
        axes.annotate(label, (intensity, achieved), textcoords="offset points", xytext=(4, -12))
    top = (
        max(
            [ceil.bf16_gflops or 0, ceil.tf32_gflops or 0, ceil.matmul_gflops]
            + [p[2] for p in everything]
        )
        * 3
    )
    bottom = min([p[2] for p in everything] + [ceil.memory_gbps * low]) / 3
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlim(low, high)
    axes.set_ylim(bottom, top)
    axes.set_xlabel("arithmetic intensity (FLOP/byte)")
    axes.set_ylabel("achieved GFLOP/s")
    axes.set_title(f"{Path(profile.file).name} on {ceil.name} ({profile.device})")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="lower right")
    figure.tight_layout()
    out = Path(path)
    figure.savefig(out, format="png")
    return out
