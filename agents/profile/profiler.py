"""Run a model's forward three ways and profile it: timed plainly (the real total), once
under the cost recorder (FLOPs and bytes per op and line), and `repeat` times under
torch.profiler with line ranges (self time per op and line).

This runs user code, so it is only ever called inside the sandboxed child.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.utils._pytree import tree_flatten

from agents.profile.assemble import OpSample, assemble
from agents.profile.costs import CostRecorder, footprint
from agents.profile.lines import LineKey, LineRecorder, parse_range
from agents.profile.report import Ceilings, Profile


def profile_model(
    model: Any,
    make_inputs: Callable[[], list[Any]],
    *,
    source_path: str,
    device: str,
    ceilings: Ceilings,
    warmup: int = 2,
    repeat: int = 5,
    size: str = "default",
    threads: int | None = None,
    source_text: str | None = None,
) -> Profile:
    """Where `model(*make_inputs())` spends its time, per line of `source_path`."""
    inputs = make_inputs()

    def forward() -> Any:
        return model(*inputs)

    with torch.no_grad():
        for _ in range(warmup):
            forward()
        total_ms = _median_wall_ms(forward, device, max(repeat, 3))
        notes = []
        try:
            costs, outputs = _cost_pass(forward, source_path)
        except Exception as error:  # an op the dispatch mode cannot see through: times only
            message = " ".join(str(error).split())[:200]
            notes.append(f"FLOPs and bytes unavailable ({type(error).__name__}: {message})")
            costs, outputs = [], forward()
        samples = _profile_pass(forward, source_path, device, repeat)
    return assemble(
        samples,
        costs,
        repeat=repeat,
        total_ms=total_ms,
        fused_bytes=_fused_bytes(model, inputs, outputs),
        ceilings=ceilings,
        file=source_path,
        device=device,
        size=size,
        threads=threads or torch.get_num_threads(),
        source_lines=source_text.splitlines() if source_text is not None else None,
        notes=notes,
    )


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _median_wall_ms(forward: Callable[[], Any], device: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        _sync(device)
        start = time.perf_counter()
        forward()
        _sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _cost_pass(forward: Callable[[], Any], source_path: str):
    lines = LineRecorder(source_path, ranges=False)
    recorder = CostRecorder(lines)
    with lines, recorder:
        outputs = forward()
    return recorder.records, outputs


def _profile_pass(
    forward: Callable[[], Any], source_path: str, device: str, repeat: int
) -> list[OpSample]:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    _sync(device)
    with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        with LineRecorder(source_path):
            for _ in range(repeat):
                forward()
        _sync(device)
    samples = []
    for event in prof.events():
        if event.device_type != DeviceType.CPU or not event.name.startswith("aten::"):
            continue
        self_us = event.self_device_time_total if device == "cuda" else event.self_cpu_time_total
        line, callers = _enclosing(event)
        samples.append(
            OpSample(
                line=line,
                name=event.name,
                self_ms=self_us / 1e3,
                input_shapes=list(event.input_shapes or []),
                callers=callers,
            )
        )
    return samples


def _enclosing(event: Any) -> tuple[LineKey | None, tuple[str, ...]]:
    """The user line whose range holds this op, and the aten ops between (outermost first)."""
    callers = []
    parent = event.cpu_parent
    while parent is not None:
        key = parse_range(parent.name)
        if key is not None:
            return key, tuple(reversed(callers))
        if parent.name.startswith("aten::"):
            callers.append(parent.name)
        parent = parent.cpu_parent
    return None, tuple(reversed(callers))


def _fused_bytes(model: Any, inputs: list[Any], outputs: Any) -> int:
    """Inputs, parameters, buffers and outputs, each counted once: what any rewrite must move."""
    tensors = [t for t in tree_flatten((inputs, outputs))[0] if isinstance(t, torch.Tensor)]
    if isinstance(model, torch.nn.Module):
        tensors += list(model.parameters()) + list(model.buffers())
    seen: set[tuple] = set()
    total = 0
    for t in tensors:
        key = (t.data_ptr(), tuple(t.shape), t.dtype) if t.layout == torch.strided else (id(t),)
        if key not in seen:
            seen.add(key)
            total += footprint(t)
    return total
