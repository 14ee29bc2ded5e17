"""A worker stopped is stopped: its own cgroup frozen as one (agents/sandbox/cgroup.py), or
without one, every process of its tree signalled, re-read until no new one appears
(agents/sandbox/peer.py); and its CPU is counted over its whole tree, exited processes
included."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from agents.sandbox import cgroup
from agents.sandbox.inspect import is_stopped, live_tree
from agents.sandbox.launch import LaunchSpec, Limits, launch
from agents.sandbox.peer import Peer, WorkerGone

requires_cgroup = pytest.mark.skipif(
    cgroup.probe().parent is None, reason=f"no cgroup here: {cgroup.probe().reason}"
)

# A process that forks one busy grandchild as soon as `go` exists, and one more each time
# `again` appears: processes born after the first stop.
FORKER = """
import os, sys, time
folder = sys.argv[1]
def burn():
    while True:
        pass
def spawn():
    if os.fork() == 0:
        burn()
spawned = 0
while True:
    wanted = os.path.exists(os.path.join(folder, "go")) + os.path.exists(
        os.path.join(folder, "again"))
    while spawned < wanted:
        spawn()
        spawned += 1
    time.sleep(0.005)
"""

# Burns 0.3 s of CPU in a child that exits and is reaped, then prints and waits.
EXITED_CHILD = """
import os, time
pid = os.fork()
if pid == 0:
    start = time.process_time()
    while time.process_time() - start < 0.3:
        pass
    os._exit(0)
os.waitpid(pid, 0)
print("done", flush=True)
time.sleep(60)
"""


def _launch(script: str, workdir: Path, *args: str):
    spec = LaunchSpec(
        argv=[sys.executable, "-c", script, *args],
        device="cpu",
        threads=1,
        workdir=workdir,
        jail=False,
        limits=Limits(address_space_bytes=4 * 1024**3),
    )
    return launch(spec)


def _peer(process: subprocess.Popen, launched=None) -> Peer:
    request_read, request_write = os.pipe()
    reply_read, reply_write = os.pipe()
    for fd in (request_read, reply_write):
        os.close(fd)
    peer = Peer(process, request_write, reply_read, label="the test's worker", strict=True)
    peer.launched = launched
    return peer


def _wait_for(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _cpu_over(peer: Peer, seconds: float) -> float:
    before = peer.cpu_seconds()
    time.sleep(seconds)
    after = peer.cpu_seconds()
    assert before is not None and after is not None
    return after - before


def _processes(peer: Peer) -> int:
    return len(peer.cgroup.pids()) if peer.cgroup is not None else len(live_tree(peer.process.pid))


def _forked_after_first_stop(peer: Peer, folder: Path) -> None:
    """The first stop is when timing begins; then a busy grandchild is born while the
    worker runs, and the next stop must stop it too."""
    (folder / "go").touch()
    _wait_for(lambda: _processes(peer) >= 2)
    peer.stop()
    peer.resume()
    (folder / "again").touch()
    _wait_for(lambda: _processes(peer) >= 3)
    peer.stop()
    assert _cpu_over(peer, 0.3) < 0.005, "a process of the stopped worker still ran"
    peer.resume()
    assert _cpu_over(peer, 0.3) > 0.05, "the resumed worker did not run"
    assert "started processes while it was timed" in peer.violation
    with pytest.raises(WorkerGone) as refused:
        peer.request("ping", 1.0)
    assert refused.value.alive


@requires_cgroup
def test_a_frozen_cgroup_stops_a_grandchild_forked_after_the_first_stop(tmp_path: Path):
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    launched = _launch(FORKER, tmp_path, str(folder))
    peer = _peer(launched.process, launched)
    try:
        assert launched.cgroup is not None and "own cgroup" in launched.isolation
        _forked_after_first_stop(peer, folder)
        path = launched.cgroup.path
        peer.stop()  # closed while frozen: killed all the same
    finally:
        launched.close()
    assert not path.exists(), "the cgroup outlived its worker"
    assert launched.process.returncode is not None


def test_without_a_cgroup_every_stop_reads_the_tree_again(tmp_path: Path):
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    process = subprocess.Popen([sys.executable, "-c", FORKER, str(folder)], start_new_session=True)
    peer = _peer(process)
    try:
        assert peer.cgroup is None
        _forked_after_first_stop(peer, folder)
        peer.stop()
        assert all(is_stopped(pid) for pid in live_tree(process.pid))
        peer.resume()
    finally:
        for pid in live_tree(process.pid):
            os.kill(pid, 9)
        process.wait()


def test_without_a_cgroup_the_verdict_says_how_the_worker_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(cgroup, "probe", lambda: cgroup.Probe(None, "switched off here"))
    launched = _launch("import time; time.sleep(30)", tmp_path)
    try:
        assert launched.cgroup is None
        assert "no cgroup (switched off here): stopped by signals" in launched.isolation
    finally:
        launched.close()


@requires_cgroup
def test_cgroup_cpu_counts_an_exited_child(tmp_path: Path):
    launched = _launch(EXITED_CHILD, tmp_path)
    try:
        assert launched.process.stdout is not None
        assert launched.process.stdout.readline().strip() == b"done"
        assert launched.cgroup is not None
        assert len(launched.cgroup.pids()) == 1  # the child is gone
        used = launched.cgroup.cpu_seconds()
        assert used is not None and used >= 0.28
    finally:
        launched.close()


def test_tree_cpu_counts_a_reaped_child_without_a_cgroup():
    process = subprocess.Popen(
        [sys.executable, "-c", EXITED_CHILD], stdout=subprocess.PIPE, start_new_session=True
    )
    peer = _peer(process)
    try:
        _wait_for(lambda: "done" in peer.stdout.text())
        used = peer.cpu_seconds()
        assert used is not None and used >= 0.28
    finally:
        process.kill()
        process.wait()


@requires_cgroup
def test_cpu_used_while_stopped_refuses_a_strict_worker(tmp_path: Path):
    """A cgroup frozen cannot run: here the test thaws it behind the peer's back, as a
    stop that missed a process would, and the peer must notice at its next request."""
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    (folder / "go").touch()
    launched = _launch(FORKER, tmp_path, str(folder))
    peer = _peer(launched.process, launched)
    try:
        assert launched.cgroup is not None
        _wait_for(lambda: _processes(peer) >= 2)
        peer.stop()
        launched.cgroup.thaw()
        time.sleep(0.2)
        launched.cgroup.freeze()
        peer.resume()
        assert "of CPU while it was stopped" in peer.violation
        with pytest.raises(WorkerGone, match="of CPU while it was stopped"):
            peer.request("ping", 1.0)
    finally:
        launched.close()


def test_a_lenient_worker_is_measured_but_never_refused(tmp_path: Path):
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    process = subprocess.Popen([sys.executable, "-c", FORKER, str(folder)], start_new_session=True)
    peer = _peer(process)
    peer.strict = False  # the reference's worker: our own code, never refused for it
    try:
        peer.stop()
        peer.resume()
        (folder / "go").touch()
        _wait_for(lambda: _processes(peer) >= 2)
        peer.stop()
        peer.resume()
        assert peer.violation == ""
    finally:
        for pid in live_tree(process.pid):
            os.kill(pid, 9)
        process.wait()


@pytest.mark.parametrize(
    ("mountinfo", "own", "expected"),
    [
        (  # hybrid: v1 controllers, cgroup2 at /sys/fs/cgroup/unified
            "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
            "37 31 0:34 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n",
            "6:freezer:/\n0::/\n",
            "/sys/fs/cgroup/unified",
        ),
        (  # unified, in a systemd scope
            "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n",
            "0::/user.slice/user-1000.slice/session-3.scope\n",
            "/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope",
        ),
        (  # a container that sees only its own subtree mounted
            "30 23 0:26 /docker/abc /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
            "0::/docker/abc/inner\n",
            "/sys/fs/cgroup/inner",
        ),
        ("32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", "1:cpu:/\n", None),
    ],
)
def test_the_cgroup_directory_is_found_from_mountinfo(mountinfo, own, expected):
    found = cgroup._own_cgroup_dir(mountinfo, own)
    assert (str(found) if found is not None else None) == expected
