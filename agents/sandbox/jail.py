"""The OS jail: bubblewrap with no network, a read-only filesystem, its own PID namespace and
hidden home directories. Where bubblewrap is missing or cannot run, callers fall back to
limits and a scrubbed environment, and say so in the verdict."""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

HIDDEN_DIRS = ("/root", "/home", "/tmp")
"""Replaced by empty tmpfs inside the jail; what Python needs from them is bound back read-only."""


@dataclass(frozen=True)
class Jail:
    """A working bubblewrap, and a description for the verdict."""

    bwrap: str

    @staticmethod
    def describe() -> str:
        return "bubblewrap (no network, read-only filesystem, own PID namespace) + limits"


@functools.cache
def find_jail() -> Jail | None:
    """The bubblewrap binary, if it is installed and user namespaces work here."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    probe = [
        bwrap,
        "--ro-bind",
        "/",
        "/",
        "--unshare-net",
        "--unshare-pid",
        "--die-with-parent",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "true",
    ]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Jail(bwrap) if done.returncode == 0 else None


def _needed_read_paths() -> list[str]:
    """Python, its libraries and this project: they must stay visible under hidden homes."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)}
    paths.add(os.path.dirname(os.path.realpath(sys.executable)))
    paths.update(entry for entry in sys.path if entry and os.path.isdir(entry))
    paths.add(str(Path(__file__).resolve().parents[2]))
    return sorted(p for p in paths if any(_under(p, hidden) for hidden in HIDDEN_DIRS))


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def gpu_device_nodes() -> list[str]:
    return sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/dri/*"))


def jail_command(
    jail: Jail, argv: list[str], *, writable: Iterable[Path], device: str
) -> list[str]:
    """bwrap arguments that run argv with only `writable` directories open for writing."""
    command = [jail.bwrap, "--ro-bind", "/", "/"]
    for hidden in HIDDEN_DIRS:
        if os.path.isdir(hidden):
            command += ["--tmpfs", hidden]
    for path in _needed_read_paths():
        command += ["--ro-bind", path, path]
    command += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/dev/shm"]
    for path in writable:
        command += ["--bind", str(path), str(path)]
    if device == "cuda":
        for node in gpu_device_nodes():
            command += ["--dev-bind", node, node]
    command += [
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
        "--chdir",
        str(next(iter(writable))),
        "--",
    ]
    return command + argv
