"""Runtime integrity: the functions a verdict depends on are unchanged, and a candidate leaves
no thread or process behind to finish its work after it returns.

Snapshots are taken before candidate code is imported and compared after it has run. A
snapshot records every callable in the namespaces of torch, time, numpy, builtins, math and of
this harness, so a patched `torch.allclose`, `time.perf_counter`, `torch.cuda.Event` or one of
our own comparison functions is caught, whatever route the candidate took to patch it.
"""

from __future__ import annotations

import builtins
import math
import os
import site
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy
import torch

HARNESS_MODULES = (
    "agents.verify.compare",
    "agents.verify.integrity",
    "agents.verify.reviewer",
    "agents.verify.timing",
    "agents.verify.child",
    "agents.sandbox.channel",
    "agents.task",
)


def _guarded_namespaces() -> dict[str, Any]:
    spaces: dict[str, Any] = {
        "torch": torch,
        "torch.Tensor": torch.Tensor,
        "torch._C.TensorBase": torch._C.TensorBase,
        "torch.nn.Module": torch.nn.Module,
        "torch.nn.functional": torch.nn.functional,
        "torch.testing": torch.testing,
        "torch.cuda": torch.cuda,
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Stream": torch.cuda.Stream,
        "torch.random": torch.random,
        "torch.autograd.grad_mode": torch.autograd.grad_mode,
        "time": time,
        "numpy": numpy,
        "numpy.testing": numpy.testing,
        "builtins": builtins,
        "math": math,
        "os": os,
        "threading": threading,
        "threading.Thread": threading.Thread,
    }
    for name, value in vars(torch.nn).items():
        if isinstance(value, type) and issubclass(value, torch.nn.Module):
            spaces[f"torch.nn.{name}"] = value
    for name in HARNESS_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            spaces[name] = module
    return spaces


@dataclass
class Snapshot:
    """The callables of every guarded namespace, by identity."""

    entries: dict[str, dict[str, int]]
    objects: dict[str, dict[str, Any]]


def take_snapshot() -> Snapshot:
    entries: dict[str, dict[str, int]] = {}
    objects: dict[str, dict[str, Any]] = {}
    for label, space in _guarded_namespaces().items():
        names = dict(vars(space))
        kept = {name: value for name, value in names.items() if _is_guarded_value(value)}
        entries[label] = {name: id(value) for name, value in kept.items()}
        objects[label] = kept  # holding them keeps their ids from being reused
    return Snapshot(entries, objects)


def _is_guarded_value(value: Any) -> bool:
    return callable(value) or isinstance(value, staticmethod | classmethod | property)


def changed_since(before: Snapshot) -> list[str]:
    """Names whose callable was replaced or deleted; additions (lazy submodules) are allowed."""
    changed = []
    spaces = _guarded_namespaces()
    for label, ids in before.entries.items():
        space = spaces.get(label)
        if space is None:
            changed.append(f"{label} (module removed)")
            continue
        current = vars(space)
        for name, ident in ids.items():
            value = current.get(name, _MISSING)
            if value is _MISSING:
                changed.append(f"{label}.{name} (deleted)")
            elif id(value) != ident and not _torch_own_wrapper(before.objects[label][name], value):
                changed.append(f"{label}.{name}")
    return changed


_MISSING = object()
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _torch_own_wrapper(original: Any, current: Any) -> bool:
    """torch wraps some of its own functions when a subsystem loads (TorchDynamo wraps
    `torch.manual_seed` and `nn.Module.__init__`, for two). Accept a replacement only when its
    code lives inside torch and it wraps the original (through `__wrapped__` or a closure)."""
    for _ in range(8):
        code = getattr(current, "__code__", None)
        if code is None or not code.co_filename.startswith(_TORCH_DIR):
            return False
        cells = [cell.cell_contents for cell in (current.__closure__ or ()) if _filled(cell)]
        if any(value is original for value in cells):
            return True
        current = getattr(current, "__wrapped__", None)
        if current is original:
            return True
    return False


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def native_threads() -> set[int]:
    """Kernel thread ids of this process (sees threads that `threading` does not)."""
    try:
        return {int(tid) for tid in os.listdir("/proc/self/task")}
    except OSError:
        return {thread.native_id or 0 for thread in threading.enumerate()}


def child_processes() -> list[int]:
    """Live child processes of this process (zombies included: they were left behind)."""
    me = os.getpid()
    found = []
    try:
        pids = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return found
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if len(fields) > 1 and int(fields[1]) == me:
            found.append(int(pid))
    return found


def warm_thread_pools(device: str) -> None:
    """Start torch's intra-op pool now, so its threads are part of the baseline."""
    a = torch.randn(256, 256)
    for _ in range(3):
        (a @ a).sum().item()
        torch.nn.functional.softmax(a, dim=-1).sum().item()
    if device == "cuda":
        b = a.cuda()
        (b @ b).sum().item()
        torch.cuda.synchronize()


THREAD_CREATORS: dict[int, str] = {}
"""Native id of each thread started through `threading` -> file of the code that started it."""
BUSY_WINDOW_S = 0.01
BUSY_CPU_NS = 1_000_000


def _library_dirs() -> tuple[str, ...]:
    """Where installed library code lives (torch, triton, tqdm...): threads it starts are
    helpers, still refused if they keep working after a call returns."""
    dirs = {os.path.dirname(torch.__file__) + os.sep}
    dirs.update(path.rstrip(os.sep) + os.sep for path in site.getsitepackages())
    return tuple(sorted(dirs))


_STDLIB_DIR = os.path.dirname(threading.__file__) + os.sep


def install_thread_tracker() -> None:
    """Record who starts each Python thread: torch starts helper threads of its own (compile
    workers), which are fine; a thread started by candidate code is not. Installed before the
    snapshot, so a candidate that removes it is caught as a patched function."""
    original = threading.Thread.start
    libraries = _library_dirs()

    def start(self, *args, **kwargs):
        creator = "unknown"
        frame = sys._getframe(1)
        while frame is not None:
            name = frame.f_code.co_filename
            if not name.startswith(_STDLIB_DIR) or "site-packages" in name:
                creator = "library" if name.startswith(libraries) else name
                break
            frame = frame.f_back
        result = original(self, *args, **kwargs)
        THREAD_CREATORS[self.native_id or 0] = creator
        return result

    threading.Thread.start = start


def _cpu_ns(tid: int) -> int | None:
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as stat:
            return int(stat.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _comm(tid: int) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return "?"


@dataclass
class LeftoverWork:
    """Threads or processes a candidate left running after it returned."""

    threads: list[str]
    processes: list[int]

    def reasons(self) -> list[str]:
        found = []
        if self.threads:
            found.append(
                "candidate left threads working after it returned: " + ", ".join(self.threads)
            )
        if self.processes:
            found.append(
                "candidate left child processes running: "
                + ", ".join(str(pid) for pid in self.processes)
            )
        return found


def leftovers(baseline_threads: Iterable[int]) -> LeftoverWork:
    """Threads and processes beyond the baseline, read right after a candidate call.

    A new thread is refused when candidate code started it, or when it keeps using the CPU
    after the call returned (work the timer would miss). Idle helper threads that torch
    starts for itself (TorchInductor and Triton on a GPU do) are allowed."""
    baseline = set(baseline_threads)
    new = sorted(native_threads() - baseline)
    flagged: list[str] = []
    watch: dict[int, int] = {}
    for tid in new:
        creator = THREAD_CREATORS.get(tid)
        if creator is not None and creator != "library":
            flagged.append(f"{_comm(tid)}[{tid}] started by {creator}")
        elif (used := _cpu_ns(tid)) is not None:
            watch[tid] = used
    if watch:
        time.sleep(BUSY_WINDOW_S)
        for tid, before in watch.items():
            after = _cpu_ns(tid)
            if after is not None and after - before > BUSY_CPU_NS:
                flagged.append(f"{_comm(tid)}[{tid}] busy after the call returned")
    return LeftoverWork(flagged, child_processes())


def active_modes() -> list[str]:
    """Torch function or dispatch modes left active: they would intercept the reference."""
    found = []
    if torch._C._len_torch_function_stack() > 0:
        found.append("a TorchFunctionMode")
    if torch._C._len_torch_dispatch_stack() > 0:
        found.append("a TorchDispatchMode")
    return found
