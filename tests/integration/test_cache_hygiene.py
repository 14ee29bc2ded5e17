"""A clean host after every run: a candidate's persistent cache is held to a quota in files as
well as bytes, the root of every source's cache is swept by least-recent use without touching
a cache in use or anything outside the root, and nothing of a candidate (files in /tmp or
/dev/shm, processes) outlives its evaluation."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agents.sandbox.caches import claim_cache, sweep_caches
from agents.sandbox.launch import LaunchSpec, Limits, launch
from agents.sandbox.quota import DirectoryQuota, directory_usage
from agents.verify.verdict import Verdict
from tests.conftest import (
    ADVERSARIAL,
    CANDIDATES,
    FAST,
    candidate_source,
    requires_jail,
    run_eval,
)
from tests.integration.test_jail import run_payload

OLD = 1000.0  # seconds since a cache's last use: well past the sweep's idle window


def fill(path: Path, files: int, size: int = 0) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for index in range(files):
        (path / f"f{index}").write_bytes(b"x" * size)
    return path


def age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def entries(path: Path) -> int:
    return sum(len(dirs) + len(files) for _, dirs, files in os.walk(path))


# --- counting ---------------------------------------------------------------------------------


def test_usage_counts_entries_and_stops_above_the_limit(tmp_path):
    fill(tmp_path / "a", 30)
    fill(tmp_path / "b", 30)
    assert directory_usage(tmp_path).entries == 62  # two folders and their sixty files
    stopped = directory_usage(tmp_path, max_entries=10)
    assert stopped.entries == 11  # one past the limit, not the whole tree
    quota = DirectoryQuota(tmp_path, max_bytes=1 << 30, max_entries=10, label="cache")
    assert quota.breach() == "cache over its quota (11 files and folders counted, more than 10)"
    assert DirectoryQuota(tmp_path, 1 << 30, 100, "cache").breach() is None


# --- the live quota and the one at launch -----------------------------------------------------

MANY_FILES = """
import time
where = os.environ["TORCH_EXTENSIONS_DIR"]
os.makedirs(where, exist_ok=True)
for index in range(5000):
    os.close(os.open(os.path.join(where, f"e{index}"), os.O_CREAT | os.O_WRONLY))
time.sleep(20)
out["survived"] = True
"""


@pytest.mark.parametrize("jail", [pytest.param(True, marks=requires_jail), False])
def test_file_quota_kills_the_child_and_empties_the_cache(tmp_path, jail):
    """Empty files cost almost no bytes: only the count stops them."""
    limits = Limits(address_space_bytes=8 * 1024**3, cache_files=1000)
    run = run_payload(MANY_FILES, tmp_path, jail=jail, limits=limits, timeout=60)
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert run.launched.cache_over_quota()
    assert "files and folders counted, more than 1,000" in (run.launched.killed_for or "")
    assert run.launched.cache_dir is not None and not any(run.launched.cache_dir.iterdir())


def test_launch_empties_a_cache_already_over_its_file_quota(tmp_path):
    """A cache left over a (smaller) quota: the child starts from an empty one."""
    cache = fill(tmp_path / "cache", 50)
    workdir = tmp_path / "work"
    workdir.mkdir()
    code = "import os, sys; print(len(os.listdir(sys.argv[1])))"
    spec = LaunchSpec(
        argv=[sys.executable, "-I", "-c", code, str(cache)],
        device="cpu",
        threads=1,
        workdir=workdir,
        cache_dir=cache,
        jail=False,
        limits=Limits(address_space_bytes=8 * 1024**3, cache_files=10),
    )
    launched = launch(spec)
    try:
        stdout, _ = launched.process.communicate(timeout=60)
    finally:
        launched.close()
    assert stdout.decode().strip() == "0"


def test_a_cache_within_its_quota_is_kept_for_the_next_run(tmp_path):
    cache = fill(tmp_path / "cache", 5)
    claim_cache(cache, max_bytes=1 << 30, max_entries=10).release()
    assert entries(cache) == 5


# --- the sweep of every source's cache --------------------------------------------------------


def test_the_sweep_keeps_the_root_under_its_file_cap_least_recently_used_first(tmp_path):
    for index, name in enumerate(["old", "middle", "new"]):
        age(fill(tmp_path / name, 40), OLD - index * 100)
    deleted = sweep_caches(tmp_path, keep_bytes=1 << 40, keep_entries=100)
    assert [path.name for path in deleted] == ["old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["middle", "new"]
    assert sweep_caches(tmp_path, keep_bytes=1 << 40, keep_entries=100) == []


def test_the_sweep_never_deletes_a_cache_in_use_or_used_lately(tmp_path):
    claimed = fill(tmp_path / "claimed", 40)
    claim = claim_cache(claimed, max_bytes=1 << 30, max_entries=1000)
    try:
        age(claimed, OLD + 100)  # the oldest, but a run holds it
        age(fill(tmp_path / "idle", 40), OLD)
        fill(tmp_path / "fresh", 40)  # used a moment ago (a run about to claim it)
        deleted = sweep_caches(tmp_path, keep_bytes=1 << 40, keep_entries=10)
        assert [path.name for path in deleted] == ["idle"]
        assert entries(claimed) == 40 and entries(tmp_path / "fresh") == 40
        # another process's sweep respects the same lock
        code = "import sys; from agents.sandbox.caches import sweep_caches as s; "
        code += "print(len(s(__import__('pathlib').Path(sys.argv[1]), 1, 1, idle_s=0)))"
        done = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True
        )
        assert done.stdout.strip() == "1", done.stderr  # "fresh" only
        assert entries(claimed) == 40
    finally:
        claim.release()
    assert [p.name for p in sweep_caches(tmp_path, 1, 1, idle_s=0)] == ["claimed"]


def test_a_release_marks_the_last_use_and_the_sweep_counts_a_used_cache_again(tmp_path):
    """The sweep remembers each cache's count by its mtime: the release's touch, after the
    child is dead, is what tells it that a run changed the cache (and what it set the mtime
    to means nothing)."""
    cache = fill(tmp_path / "a", 10)
    age(cache, OLD)
    assert sweep_caches(tmp_path, keep_bytes=1 << 40, keep_entries=100) == []
    claim = claim_cache(cache, max_bytes=1 << 30, max_entries=1000)
    fill(cache / "more", 200)
    os.utime(cache, (time.time() + 10**6,) * 2)  # a child hiding its last use in the future
    claim.release()
    assert abs(cache.stat().st_mtime - time.time()) < 60
    age(cache, OLD)
    assert [p.name for p in sweep_caches(tmp_path, keep_bytes=1 << 40, keep_entries=100)] == ["a"]


def test_the_sweep_stays_inside_the_root_and_removes_links_it_orphaned(tmp_path):
    root, outside = tmp_path / "build", fill(tmp_path / "outside", 3)
    old = fill(root / "spare-0a", 40)
    (old / "into-outside").symlink_to(outside)  # a candidate's link out of its cache
    os.symlink("spare-0a", root / "0123456789abcdef")  # a source's name for a spare's cache
    os.symlink(outside, root / "elsewhere")
    age(old, OLD)
    assert [p.name for p in sweep_caches(root, keep_bytes=1 << 40, keep_entries=10)] == ["spare-0a"]
    assert sorted(p.name for p in root.iterdir()) == ["elsewhere"]  # its target still exists
    assert entries(outside) == 3


def test_a_cache_held_elsewhere_gives_a_private_one_deleted_at_release(tmp_path):
    """One source's cache serves one run at a time: while another run (or a sweep deleting it)
    holds it, a claim gets a fresh private cache beside it, never the shared one, and never a
    wait; the shared cache is untouched, and the private one is gone at release."""
    cache = fill(tmp_path / "0123456789abcdef", 3)
    first = claim_cache(cache, 1 << 30, 100)
    second = claim_cache(cache, 1 << 30, 2)  # a quota the shared cache is over: not emptied
    try:
        assert first.path == cache and not first.private
        assert second.private and second.path.parent == tmp_path
        assert second.path.name.startswith("0123456789abcdef.run-")
        assert second.path.is_dir() and not any(second.path.iterdir())
        assert entries(cache) == 3
        fill(second.path, 4)
        probe = os.open(second.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with pytest.raises(BlockingIOError):  # held against the sweep, as the shared one
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(probe)
    finally:
        second.release()
        first.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == [cache.name]
    third = claim_cache(cache, 1 << 30, 100)  # free again: the shared cache, reused
    third.release()
    assert third.path == cache and entries(cache) == 3


def test_a_claim_holds_the_directory_at_the_path_after_a_sweep_deleted_it(tmp_path):
    """A sweep that deleted the cache between the claim's open and its lock (and a run that
    made it again): the claim holds the directory now at the path, not the deleted one."""
    cache = tmp_path / "cache"
    real_flock, calls = fcntl.flock, []

    def swept_first(fd: int, operation: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            os.rename(cache, tmp_path / "swept")  # the sweep's delete, as the claim sees it
            cache.mkdir()
        real_flock(fd, operation)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fcntl, "flock", swept_first)
        claim = claim_cache(cache, 1 << 30, 100)
    try:
        assert len(calls) == 2 and claim.path == cache and not claim.private
        probe = os.open(cache, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with pytest.raises(BlockingIOError):  # held: the directory now at the path
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(probe)
    finally:
        claim.release()


# --- whole evaluations ------------------------------------------------------------------------


def test_a_candidate_with_many_files_is_refused_and_its_cache_emptied(tmp_path):
    cheat = ADVERSARIAL / "cache_many_files.py"
    result = run_eval("linear_relu.py", cheat, static_check=False, cache_dir=tmp_path)
    assert result.verdict is Verdict.REJECTED, result.reasons
    assert any("20,000 files" in reason for reason in result.reasons), result.reasons
    assert not any("out of memory" in reason for reason in result.reasons), result.reasons
    source_hash = hashlib.sha256(cheat.read_text().encode()).hexdigest()[:16]
    assert entries(tmp_path / "build" / source_hash) == 0


LEAVER = """
import os, sys, tempfile, time
import torch
import torch.nn as nn

MARK = "{mark}"


def _leave():
    for folder in {folders}:
        with open(os.path.join(folder, MARK), "w") as handle:
            handle.write("left behind")
    handle, _ = tempfile.mkstemp(prefix=MARK)
    os.close(handle)
    if os.fork() == 0:
        try:
            os.setsid()
        except OSError:
            pass
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)", MARK])
        os._exit(0)
    os.wait()
    for _ in range(100):  # the daemon runs, or this candidate fails and the test with it
        for pid in os.listdir("/proc"):
            try:
                if pid.isdigit() and MARK.encode() in open(f"/proc/{{pid}}/cmdline", "rb").read():
                    return
            except OSError:
                pass
        time.sleep(0.05)
    raise RuntimeError("the daemon did not start")


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        _leave()

    def forward(self, x):
        return torch.relu(self.linear(x))
"""


def processes_with(mark: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def leftovers(mark: str) -> list[str]:
    places = [Path("/tmp"), Path("/dev/shm"), Path("/var/tmp")]
    return [str(p) for place in places if place.is_dir() for p in place.glob(f"{mark}*")]


@requires_jail
def test_after_a_jailed_eval_nothing_of_the_candidate_remains(tmp_path):
    """/tmp and /dev/shm are the jail's own tmpfs, the scratch directory is removed, and the
    PID namespace takes a double-forked daemon with it."""
    mark = f"ka-leftover-{secrets.token_hex(6)}"
    source = LEAVER.format(mark=mark, folders=["/tmp", "/dev/shm"])
    result = run_eval("linear_relu.py", candidate_source(source), static_check=False)
    assert result.verdict is Verdict.CORRECT, result.reasons
    assert leftovers(mark) == []
    assert processes_with(mark) == []


def test_without_the_jail_its_scratch_and_processes_go_and_the_verdict_says_what_may_not(
    tmp_path,
):
    """--no-jail: TMPDIR is the scratch directory, removed after the run; the session (or
    cgroup) kill takes the daemon; what it writes elsewhere on the host is not swept, and
    the isolation line says so."""
    mark = f"ka-leftover-{secrets.token_hex(6)}"
    source = LEAVER.format(mark=mark, folders=[])
    try:
        result = run_eval(
            "linear_relu.py", candidate_source(source), static_check=False, jail=False
        )
        assert result.verdict is Verdict.CORRECT, result.reasons
        assert "/tmp and /dev/shm included, is not swept" in result.isolation
        assert leftovers(mark) == []
        deadline = time.monotonic() + 5
        while processes_with(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_with(mark) == []
    finally:
        for pid in processes_with(mark):
            os.kill(pid, signal.SIGKILL)


def test_a_cache_burst_by_a_concurrent_run_of_the_same_source_is_a_verdict(tmp_path):
    """Two runs of one source share its cache: when the other run's cache bomb makes this
    run's fresh worker die before hello, the verdict is the quota's rejection, not an
    EvalError ("the sandbox failed to start", which failed make test under xdist)."""
    candidate = (CANDIDATES / "linear_relu_honest.py").read_text()
    cache_root = tmp_path / "caches"
    own = cache_root / "build" / hashlib.sha256(candidate.encode()).hexdigest()[:16]
    stop = threading.Event()

    def the_other_run() -> None:  # keeps writing into the shared cache, as the bomb did
        while not stop.is_set():
            own.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                (own / "bomb").write_bytes(b"\0" * (2 << 20))
            time.sleep(0.02)

    writer = threading.Thread(target=the_other_run, daemon=True)
    writer.start()
    try:
        result = run_eval(
            "linear_relu.py",
            candidate_source(candidate),
            cache_dir=cache_root,
            jail=False,
            limits=Limits(address_space_bytes=8 * 1024**3, cache_bytes=1 << 20),
        )
    finally:
        stop.set()
        writer.join()
    assert result.verdict is Verdict.REJECTED, (result.verdict, result.reasons)
    assert any("grew past its quota" in reason for reason in result.reasons), result.reasons


def test_two_runs_of_one_cache_bomb_at_once_are_both_refused(tmp_path):
    """The same source judged twice at once (as xdist ran the adversarial suite's two
    cache_bomb tests, one of which read correct): each run's quota counts its own cache only,
    so neither run's enforcement (its cache emptied at claim or at close) hides the other's
    bomb. The private cache of the run that found the source's cache held is gone after."""
    cheat = ADVERSARIAL / "cache_bomb.py"
    limits = replace(FAST.limits, cache_bytes=64 << 20)  # the cheat's header: cache=64M
    start = threading.Barrier(2)
    results: list = [None, None]

    def judge(index: int) -> None:
        start.wait()
        results[index] = run_eval(
            "linear_relu.py", cheat, static_check=False, limits=limits, cache_dir=tmp_path
        )

    runs = [threading.Thread(target=judge, args=(index,)) for index in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(300)
    for result in results:
        assert result is not None
        assert result.verdict is Verdict.REJECTED, (result.verdict, result.reasons)
        assert any("grew past its quota" in reason for reason in result.reasons), result.reasons
    source_hash = hashlib.sha256(cheat.read_text().encode()).hexdigest()[:16]
    assert os.listdir(tmp_path / "build") == [source_hash]
    assert entries(tmp_path / "build" / source_hash) == 0


HOLD = "import time; time.sleep(30)"
BOMB = """
import os, time
where = os.environ["TORCH_EXTENSIONS_DIR"]
os.makedirs(where, exist_ok=True)
for index in range(24):
    with open(os.path.join(where, f"blob{index}"), "wb") as handle:
        handle.write(b"x" * (1 << 20))
time.sleep(30)
"""


def test_one_runs_files_never_count_against_another_run_of_the_same_source(tmp_path):
    """Two children given one source's cache at once: the second gets a private cache, and its
    bomb kills it alone; the first, which wrote nothing, runs on with its cache untouched."""
    cache = fill(tmp_path / "0123456789abcdef", 3)
    limits = Limits(address_space_bytes=8 * 1024**3, cache_bytes=16 << 20)

    def start(code: str, name: str):
        workdir = tmp_path / name
        workdir.mkdir()
        argv = [sys.executable, "-I", "-c", code]
        spec = LaunchSpec(argv, "cpu", 1, workdir, cache_dir=cache, jail=False, limits=limits)
        return launch(spec)

    holder = start(HOLD, "holder")
    bomber = start(BOMB, "bomber")
    try:
        assert bomber.process.wait(timeout=60) == -signal.SIGKILL
        assert bomber.cache_over_quota() and "cache over its quota" in (bomber.killed_for or "")
        time.sleep(1.5)  # more than a quota walk's period: the holder's cache was walked again
        assert holder.process.poll() is None and holder.killed_for is None
        assert holder.cache_dir == cache and bomber.cache_dir != cache
        assert bomber.cache_dir is not None and bomber.cache_dir.parent == tmp_path
    finally:
        bomber.close()
        holder.close()
    assert entries(cache) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [cache.name, "bomber", "holder"]
