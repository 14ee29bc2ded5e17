"""The one way a sandboxed child is started: allow-listed environment, bubblewrap jail (or,
only when the user asked, none), system-call filter, rlimits, process cap, CPU pinning,
its own session, its own cgroup (agents/sandbox/cgroup.py: frozen, counted and killed as
one; joined before it can fork), and quotas on what it may write.

Why one function: every child (the verifier's, the profiler's, the offline optimizer's) runs
code we do not trust, and a second spawn path is a second place to forget a wall.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from agents.sandbox import cgroup as cgroups
from agents.sandbox import seccomp
from agents.sandbox.caches import CacheClaim, claim_cache
from agents.sandbox.cgroup import WorkerCgroup
from agents.sandbox.env import sandbox_environment
from agents.sandbox.jail import (
    NOBODY,
    Jail,
    JailPlan,
    find_jail,
    plan_command,
    prepare_writable,
    unavailable_reason,
)
from agents.sandbox.privileges import LIBC, SANDBOX_ID, drop_and_stage
from agents.sandbox.quota import (
    MONITOR,
    DirectoryQuota,
    ProcessTable,
    Watch,
    empty_directory,
    kill_session,
)

PROCESS_HEADROOM = 16
"""Tasks beyond max_processes + threads + cores: bubblewrap's own two processes, Python's and
CUDA's helper threads. Measured (tests/integration/test_jail.py, the compilers test, which
samples the jail's task count): torch imported, a load_inline build (ninja, g++, cc1plus,
as) and a torch.compile on the CPU peak at 8 tasks with one compute thread on 2 cores, so the cap
(64 + threads + cores + 16) leaves an honest candidate far more than it uses, and a fork
loop stops within a hundred tasks of starting."""


@dataclass(frozen=True)
class Limits:
    """Wall-clock limits per phase and OS limits for the child."""

    build_timeout_s: float = 120.0
    run_timeout_s: float = 60.0
    address_space_bytes: int | None = None  # None: a share of this machine's memory
    file_size_bytes: int = 2 * 1024**3
    tmpfs_bytes: int = 2 * 1024**3  # the jail's private /tmp (and the scratch directory)
    cache_bytes: int = 2 * 1024**3  # the candidate's persistent cache directory
    cache_files: int = 20_000  # entries (inodes) in the cache, and in the scratch directory
    max_processes: int = 64  # tasks (threads count) beyond the child's compute threads


@dataclass(frozen=True)
class LaunchSpec:
    """What to run and under which walls."""

    argv: list[str]
    device: str  # "cpu" | "cuda"
    threads: int  # OMP/MKL threads, and the size of the CPU affinity set
    workdir: Path  # private scratch directory the caller created: bound rw, the child's cwd
    cache_dir: Path | None = None  # persistent, private to one candidate source: bound rw
    env_extra: Mapping[str, str] = field(default_factory=dict)  # e.g. CUDA_VISIBLE_DEVICES
    pass_fds: tuple[int, ...] = ()  # protocol pipes the child inherits
    jail: bool = True  # False only when the user asked for it (--no-jail)
    limits: Limits = Limits()
    cpus: tuple[int, ...] | None = None  # None: the first `threads` CPUs we may use
    read_only: tuple[str, ...] = ()  # more host paths the child reads (an entry's package)


class JailUnavailable(Exception):
    """The jail was asked for and cannot start here; the message is one line."""


class LaunchError(Exception):
    """The child could not be started; the message is one line."""


@dataclass
class Launched:
    """A started child. `close` ends it and everything it started."""

    process: subprocess.Popen
    isolation: str
    watch: Watch | None = None
    plan: JailPlan | None = None
    cache_dir: Path | None = None
    cgroup: WorkerCgroup | None = None  # the child's own cgroup v2, where one could be had
    claim: CacheClaim | None = None  # its cache, held against the sweep until close
    _closed: bool = False

    def cache_over_quota(self) -> bool:
        return self.watch is not None and "cache" in self.watch.over

    @property
    def killed_for(self) -> str | None:
        """Why the quota monitor killed the child (cache, scratch, process cap), if it did."""
        return self.watch.reason if self.watch is not None else None

    def close(self) -> None:
        """Kill the whole process group, reap, close the pipes, stop watching; an over-quota
        cache is emptied so the next run of this source starts clean."""
        if self._closed:
            return
        self._closed = True
        if self.cgroup is not None:  # every process it ever started, wherever it went
            self.cgroup.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        if self.plan is None:  # no jail: groups its processes made are still in its session
            kill_session(self.process.pid)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.watch is not None:
            MONITOR.remove(self.watch)
        if self.plan is not None:
            self.plan.cleanup()
        if self.cache_over_quota() and self.cache_dir is not None:
            empty_directory(self.cache_dir)
        if self.claim is not None:
            self.claim.release()


def default_address_space() -> int:
    """Three quarters of physical memory: a runaway candidate fails alone, not the machine."""
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return max(int(pages * 0.75), 4 * 1024**3)


def process_cap(threads: int, limits: Limits) -> int:
    """Tasks the child may hold at once: RLIMIT_NPROC counts threads, and torch starts one
    per compute thread plus a pool sized by the machine's cores."""
    return limits.max_processes + threads + (os.cpu_count() or 1) + PROCESS_HEADROOM


def default_cpus(threads: int) -> tuple[int, ...]:
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return tuple(allowed[: max(threads, 1)])


PR_SET_PDEATHSIG = 1
_PRCTL = getattr(LIBC, "prctl", None)


def _limit_child(address_space: int | None, file_size: int, parent: int | None = None) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    if address_space is not None:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    # The child has its own session, so nothing would end it if the process that started it
    # were killed (a Ray worker cancelled by force, a pool's parent killed): on Linux the
    # kernel sends it SIGKILL when the thread that started it dies (run_child's thread, which
    # outlives the child anyway). It holds across execve, except into a set-user-ID binary,
    # and a change of user clears it: it is set after `drop_and_stage`.
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if parent is not None and os.getppid() != parent:
            os._exit(1)  # the parent died before prctl took effect


def _child_setup(
    plan: JailPlan | None,
    address_space: int | None,
    file_size: int,
    parent: int,
    nproc: int | None,
    cpus: tuple[int, ...],
    loader: seccomp.Loader | None,
    cgroup_fd: int | None = None,
) -> None:
    """The preexec: into the worker's cgroup (first: as root, before it can fork), staging
    and uid drop, rlimits and parent-death signal, CPU set, and (without the jail) the
    filters, last, since they refuse sched_setaffinity."""
    if cgroup_fd is not None:
        with contextlib.suppress(OSError):  # the parent checks, and says so if it failed
            WorkerCgroup.join(cgroup_fd)
    if plan is not None:
        drop_and_stage(plan.stage, plan.drop_ids)
    _limit_child(address_space, file_size, parent)
    if nproc is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    if cpus:
        os.sched_setaffinity(0, cpus)
    if loader is not None:
        loader.load()


def _user_tasks(uid: int) -> int:
    """Tasks (threads) this uid holds now, from /proc."""
    table = ProcessTable.read()
    total = 0
    for pid, count in table.threads.items():
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{pid}").st_uid == uid:
                total += count
    return total


@functools.cache
def _per_namespace_nproc() -> bool:
    """Linux 5.14+ counts RLIMIT_NPROC per user namespace: a jail's limit is its own."""
    try:
        major, minor = (int(part) for part in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 14)


def launch(spec: LaunchSpec) -> Launched:
    """Start spec.argv under every wall. Raises JailUnavailable when the jail was asked for and
    cannot start, LaunchError when the child cannot be started at all."""
    jail = _requested_jail(spec)
    limits = spec.limits
    cap = process_cap(spec.threads, limits)
    general = seccomp.general_filter()
    claim: CacheClaim | None = None  # held against agents.sandbox.caches' sweep until close
    if spec.cache_dir is not None:  # emptied when over either quota already: start afresh
        claim = claim_cache(spec.cache_dir, limits.cache_bytes, limits.cache_files)
        spec = replace(spec, cache_dir=claim.path)  # a private one while another run holds it
    home_root = Path("/tmp") if jail is not None else spec.workdir
    if jail is None:
        (spec.workdir / "home").mkdir(exist_ok=True)
    env = sandbox_environment(
        home_root=home_root, cache_dir=spec.cache_dir, threads=spec.threads, extra=spec.env_extra
    )
    # CUDA reserves far more virtual memory than it uses, so an address-space cap breaks it.
    address_space = None
    if spec.device != "cuda":
        address_space = limits.address_space_bytes or default_address_space()
    walls = _walls(jail, spec, general, cap)
    cgroup, cgroup_fd = _new_cgroup()
    cpus = spec.cpus if spec.cpus is not None else default_cpus(spec.threads)
    preexec = functools.partial(
        _child_setup,
        walls.plan,
        address_space,
        limits.file_size_bytes,
        os.getpid(),
        walls.rlimit,
        cpus,
        walls.loader,
        cgroup_fd,
    )
    process = _spawn(spec, walls, env, preexec, cgroup, cgroup_fd, jailed=jail is not None)
    cgroup, cgroup_line = _joined_cgroup(cgroup, process.pid)
    isolation = _describe(
        jail, general, walls.loader, cap, walls.watched_cap, limits, address_space, cgroup_line
    )
    watch = _watch(spec, process.pid, walls.watched_cap, by_session=jail is None)
    return Launched(
        process,
        isolation,
        watch=watch,
        plan=walls.plan,
        cache_dir=spec.cache_dir,
        cgroup=cgroup,
        claim=claim,
    )


def _requested_jail(spec: LaunchSpec) -> Jail | None:
    """The jail to start in, or None when the user asked for none; asked for and not
    available here is an error that says what to do."""
    if not spec.jail:
        return None
    jail = find_jail()
    if jail is None:
        raise JailUnavailable(
            f"{unavailable_reason()}: install it (apt-get install bubblewrap / dnf install "
            "bubblewrap), or pass --no-jail to run candidates without it"
        )
    return jail


@dataclass(frozen=True)
class _Walls:
    """How the process cap and the system-call filter are enforced for one child."""

    argv: list[str]
    plan: JailPlan | None = None  # the bubblewrap command, in the jail
    loader: seccomp.Loader | None = None  # the filters the preexec loads, without the jail
    rlimit: int | None = None  # RLIMIT_NPROC the preexec sets
    watched_cap: int | None = None  # the cap the quota watcher enforces from outside


def _walls(jail: Jail | None, spec: LaunchSpec, general: bytes | None, cap: int) -> _Walls:
    """In the jail: bubblewrap's command, its cap as RLIMIT_NPROC inside or watched. Without:
    the filters loaded in the preexec, and the cap as an rlimit (watched for root, whom an
    rlimit does not bind)."""
    argv = list(spec.argv)
    if jail is not None:
        writable = [spec.workdir, *([spec.cache_dir] if spec.cache_dir is not None else [])]
        try:
            plan = _jail_plan(jail, spec, argv, writable, cap)
        except OSError as error:
            raise JailUnavailable(f"the jail could not be prepared: {error}") from None
        return _Walls(plan.argv, plan=plan, watched_cap=None if jail.rlimit_nproc else cap)
    loader = seccomp.Loader(general, kill_filter=True)
    if os.geteuid() == 0:
        return _Walls(argv, loader=loader, watched_cap=cap)
    return _Walls(argv, loader=loader, rlimit=cap + _user_tasks(os.getuid()))


def _spawn(
    spec: LaunchSpec,
    walls: _Walls,
    env: dict[str, str],
    preexec: Callable[[], None],
    cgroup: WorkerCgroup | None,
    cgroup_fd: int | None,
    *,
    jailed: bool,
) -> subprocess.Popen:
    """Popen with the preexec; a failure undoes the plan's staging and the cgroup, and the
    parent's copies of the child's descriptors are closed either way."""
    plan = walls.plan
    try:
        return subprocess.Popen(
            walls.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(*spec.pass_fds, *(plan.pass_fds if plan else ())),
            env=env,
            cwd=spec.workdir,
            start_new_session=True,
            preexec_fn=preexec,
        )
    except (OSError, subprocess.SubprocessError) as error:
        if plan is not None:
            plan.cleanup()
        if cgroup is not None:
            cgroup.remove()
        kind = JailUnavailable if jailed else LaunchError
        raise kind(f"the sandboxed child could not start: {error}") from None
    finally:
        if plan is not None:
            plan.close_fds()
        if cgroup_fd is not None:
            os.close(cgroup_fd)


def _joined_cgroup(cgroup: WorkerCgroup | None, pid: int) -> tuple[WorkerCgroup | None, str]:
    """The cgroup the child did join (None where it could not), and how the verdict says so."""
    line = "own cgroup (frozen, counted and killed as one)"
    if cgroup is None:
        line = f"no cgroup ({cgroups.probe().reason or 'none could be made'})"
    elif not cgroup.holds(pid):
        cgroup.remove()
        cgroup, line = None, "no cgroup (the child could not join its own)"
    if cgroup is None:
        line += ": stopped by signals, its processes re-read at every stop"
    return cgroup, line


def _watch(spec: LaunchSpec, pid: int, watched_cap: int | None, *, by_session: bool) -> Watch:
    """The quota monitor's watch on the child: scratch and cache sizes, and the task cap
    where no rlimit enforces it."""
    limits = spec.limits
    quotas = [DirectoryQuota(spec.workdir, limits.tmpfs_bytes, limits.cache_files, "scratch")]
    if spec.cache_dir is not None:
        quotas.append(
            DirectoryQuota(spec.cache_dir, limits.cache_bytes, limits.cache_files, "cache")
        )
    watch = Watch(pid=pid, directories=quotas, max_tasks=watched_cap, by_session=by_session)
    MONITOR.add(watch)
    return watch


def _new_cgroup() -> tuple[WorkerCgroup | None, int | None]:
    """The child's own cgroup and the fd its preexec joins it through; (None, None) where
    none can be had (the caller falls back to signals)."""
    cgroup = WorkerCgroup.create()
    if cgroup is None:
        return None, None
    try:
        return cgroup, cgroup.join_fd()
    except OSError:
        cgroup.remove()
        return None, None


def _jail_plan(jail: Jail, spec: LaunchSpec, argv, writable, cap: int) -> JailPlan:
    """Hand the writable trees to the sandbox uid and build the bubblewrap command. In an
    RLIMIT_NPROC mode the limit is set inside the jail: the cap itself where the kernel
    counts per user namespace, else the uid's current tasks plus the cap."""
    prepare_writable(jail, writable)
    inner = None
    if jail.rlimit_nproc:
        inner = cap
        if not _per_namespace_nproc():
            inner += _user_tasks(SANDBOX_ID if jail.mode == NOBODY else os.getuid())
    filter_fd = seccomp.filter_fd()
    try:
        return plan_command(
            jail,
            argv,
            workdir=spec.workdir,
            cache_dir=spec.cache_dir,
            device=spec.device,
            tmpfs_bytes=spec.limits.tmpfs_bytes,
            nproc=inner,
            seccomp_fd=filter_fd,
            read_only=spec.read_only,
        )
    except BaseException:
        if filter_fd is not None:
            os.close(filter_fd)
        raise


def _describe(jail, general, loader, cap, watched_cap, limits, address_space, cgroup) -> str:
    """The verdict's one line: which walls stood (`cgroup`: how it is frozen and counted)."""
    if jail is not None:
        parts = [jail.describe()]
    else:
        parts = [
            "no jail (--no-jail): own session, scrubbed environment, the host's files writable "
            "(TMPDIR is its scratch, removed after; what it writes elsewhere, /tmp and /dev/shm "
            "included, is not swept)"
        ]
        if loader is not None and loader.kill_filter_supported:
            parts.append("kill filter (signals to itself and its group only)")
    if general is not None:
        parts.append("seccomp filter")
    else:
        parts.append(f"NO seccomp filter ({seccomp.unavailable_reason()})")
    how = "watched" if watched_cap is not None else "RLIMIT_NPROC"
    parts.append(f"{cap} tasks ({how})")
    parts.append(
        f"{limits.tmpfs_bytes >> 20} MiB scratch, {limits.cache_bytes >> 20} MiB cache, "
        f"{limits.cache_files:,} files each"
    )
    if address_space is not None:
        parts.append(f"{address_space / 1024**3:.0f} GiB address space")
    parts.append(cgroup)
    return ", ".join(parts)
