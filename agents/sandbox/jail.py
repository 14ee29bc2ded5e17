"""The OS jail: bubblewrap with every capability dropped, no network, its own PID, IPC, UTS
and cgroup namespaces, a root filesystem holding only what the child needs (read-only), a
size-capped private /tmp, and a synthesised /etc/passwd.

Modes, best first (`find_jail` probes them once per process, each with a real
`python -I -c "import torch"` inside, and keeps the first that works):

- `nobody`: run as root, the launcher drops to uid/gid 65534 before exec'ing an unprivileged
  bubblewrap (user namespace). The kernel then enforces RLIMIT_NPROC on the child, counted
  per user namespace (Linux 5.14+), so concurrent jails do not share one count. Sources that
  uid 65534 cannot reach (a Python under /root) are bind-mounted by root into a private
  staging directory first, in a mount namespace of the launcher's own.
- `root-userns`: bubblewrap as root with `--cap-drop ALL` in a user namespace (uid 65534
  inside, root outside); RLIMIT_NPROC does not bind root, so a watcher outside counts the
  jail's tasks and kills it over the cap (agents.sandbox.quota).
- `root`: the same without a user namespace (kernels that refuse one).
- `user`: run as a normal user, bubblewrap is unprivileged already; RLIMIT_NPROC as `nobody`.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import importlib.util
import os
import shutil
import site
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agents.sandbox.privileges import SANDBOX_ID, drop_and_stage

NOBODY, ROOT_USERNS, ROOT, USER = "nobody", "root-userns", "root", "user"
RLIMIT_MODES = (NOBODY, USER)
"""Modes where RLIMIT_NPROC holds; the others need the watcher."""

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
ETC_ENTRIES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime")
"""From the host's /etc: the dynamic linker's cache (ldconfig -p, which Triton reads to find
libcuda), its configuration, Debian's alternatives (cc, c++ are links through them) and the
time zone. Never passwd, group or shadow: those are synthesised."""
EXTRA_ROOTS = ("/opt/",)
"""Where `tool_paths` may bind from, beside the interpreter's own prefixes."""

_MODE_TEXT = {
    NOBODY: "unprivileged bubblewrap as uid 65534 (root dropped before it), RLIMIT_NPROC",
    ROOT_USERNS: "bubblewrap as root, --cap-drop ALL, user namespace (uid 65534 inside), "
    "process cap watched from outside",
    ROOT: "bubblewrap as root, --cap-drop ALL, process cap watched from outside",
    USER: "unprivileged bubblewrap (user namespace), RLIMIT_NPROC",
}


@dataclass(frozen=True)
class Jail:
    """A working bubblewrap in one mode, with the options this version of it knows."""

    bwrap: str
    mode: str
    options: frozenset[str] = frozenset()

    def describe(self) -> str:
        """One line for the verdict: which jail, and that capabilities are gone."""
        walls = "all capabilities dropped, no network, own PID namespace, minimal read-only root"
        return f"bubblewrap jail [{self.mode}]: {_MODE_TEXT[self.mode]}; {walls}"

    @property
    def rlimit_nproc(self) -> bool:
        return self.mode in RLIMIT_MODES

    @property
    def inner_id(self) -> int:
        """The uid (and gid) the child has inside."""
        if self.mode in (NOBODY, ROOT_USERNS):
            return SANDBOX_ID
        return os.getuid() if self.mode == USER else 0

    def has(self, option: str) -> bool:
        return option in self.options


@dataclass
class JailPlan:
    """A bubblewrap command line, with what the launcher must do around it."""

    argv: list[str]
    pass_fds: list[int] = field(default_factory=list)
    stage: list[tuple[str, str]] = field(default_factory=list)  # (source, staging mountpoint)
    stage_dir: str | None = None
    drop_ids: bool = False

    def close_fds(self) -> None:
        """The parent's copies of the data descriptors, once the child has started."""
        for fd in self.pass_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pass_fds = []

    def cleanup(self) -> None:
        """Remove the staging mountpoints (the mounts lived in the child's namespace)."""
        if self.stage_dir is not None:
            shutil.rmtree(self.stage_dir, ignore_errors=True)
            self.stage_dir = None


SHIPPED_PACKAGES = ("agents", "memory")
"""The project's packages a sandboxed child may import: agents/, and memory/ below it (the
offline child's triton-gemm pass reads memory/tuning.py on CUDA). Never server/."""


def project_root() -> Path:
    return Path(__file__).resolve().parents[2]


def shipped_package_dirs() -> list[str]:
    """Where this process finds SHIPPED_PACKAGES: side by side in a checkout; on a Ray worker
    each in its own py_modules folder, which Ray puts on PYTHONPATH (so `python_paths` binds
    it and the child's bootstrap restores it). A package this process cannot import is left
    out: binding a path that does not exist would stop bubblewrap."""
    found = []
    for name in SHIPPED_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            found.extend(
                str(Path(location).resolve()) for location in spec.submodule_search_locations
            )
    return found


@functools.cache
def bwrap_options(bwrap: str) -> frozenset[str]:
    """The options this bubblewrap knows, read from its --help (0.8 has them all; the GPU
    machine's may be older)."""
    wanted = ("--disable-userns", "--size", "--perms", "--unshare-cgroup-try", "--cap-drop")
    try:
        text = subprocess.run(
            [bwrap, "--help"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    help_text = text.stdout + text.stderr
    return frozenset(option for option in wanted if f"{option} " in help_text)


def candidate_modes() -> list[str]:
    return [NOBODY, ROOT_USERNS, ROOT] if os.geteuid() == 0 else [USER]


_UNAVAILABLE: list[str] = []
_FIND_LOCK = threading.Lock()


@functools.cache
def _find_jail() -> Jail | None:
    _UNAVAILABLE.clear()
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        _UNAVAILABLE.append("bubblewrap (bwrap) is not installed")
        return None
    options = bwrap_options(bwrap)
    failures = []
    for mode in candidate_modes():
        jail = Jail(bwrap, mode, options)
        error = probe(jail)
        if error is None:
            return jail
        failures.append(f"{mode}: {error}")
    _UNAVAILABLE.append("bubblewrap cannot start here (" + "; ".join(failures) + ")")
    return None


def find_jail() -> Jail | None:
    """The best mode that starts here, probed once per process (pool threads that ask at
    once wait for one probe); None when bubblewrap is missing or no mode works
    (`unavailable_reason` then says why)."""
    with _FIND_LOCK:
        return _find_jail()


def unavailable_reason() -> str:
    find_jail()
    return _UNAVAILABLE[0] if _UNAVAILABLE else "bubblewrap is available"


PROBE_CODE = """
import importlib.util, os, sys
spec = importlib.util.find_spec("torch")
root = os.path.dirname(spec.origin)
libs = os.path.join(root, "lib")
shared = sorted(n for n in os.listdir(libs) if ".so" in n) if os.path.isdir(libs) else []
for path in [spec.origin, *(os.path.join(libs, n) for n in shared[:1])]:
    with open(path, "rb") as handle:
        handle.read(1)
"""
"""What a candidate's start needs of this uid: torch found and its files readable. Reading
them, not importing torch, keeps the probe at a few tens of milliseconds (an import took 1.3
s of every CLI call's first verdict)."""


def probe(jail: Jail, timeout_s: float = 120.0) -> str | None:
    """Start the interpreter in `jail` the way a candidate starts and read torch's files: the
    mode works only if its uid can read the environment (its preexec is a real launch's:
    agents.sandbox.privileges). The error's last line, or None."""
    code = PROBE_CODE if _has_torch() else "import sys"
    workdir = Path(tempfile.mkdtemp(prefix="kernel-agent-probe-"))
    plan = None
    try:
        prepare_writable(jail, [workdir])
        plan = plan_command(
            jail,
            [sys.executable, "-I", "-c", code],
            workdir=workdir,
            cache_dir=None,
            device="cpu",
            tmpfs_bytes=256 * 1024**2,
            nproc=None,
            seccomp_fd=None,
        )
        done = subprocess.run(
            plan.argv,
            capture_output=True,
            timeout=timeout_s,
            pass_fds=plan.pass_fds,
            preexec_fn=functools.partial(drop_and_stage, plan.stage, plan.drop_ids),
            start_new_session=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp"},
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as error:
        return f"{type(error).__name__}: {error}"
    finally:
        if plan is not None:
            plan.close_fds()
            plan.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    if done.returncode == 0:
        return None
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def prepare_writable(jail: Jail, paths: Iterable[Path]) -> None:
    """In `nobody` mode the child is uid 65534 outside too: hand it its writable trees.
    Symlinks are changed themselves, never followed (a link planted by an earlier candidate
    must not make us chown what it points to)."""
    if jail.mode != NOBODY:
        return
    for path in paths:
        os.lchown(path, SANDBOX_ID, SANDBOX_ID)
        for parent, dirs, files in os.walk(path, followlinks=False):
            for name in dirs + files:
                with contextlib.suppress(OSError):
                    os.lchown(os.path.join(parent, name), SANDBOX_ID, SANDBOX_ID)


def python_paths() -> list[str]:
    """This interpreter, its prefixes and its import path: the child runs the same Python.
    Left out: the project root and its ancestors (only SHIPPED_PACKAGES are bound), and
    what `python -I` never puts on the child's path: sys.path[0] (the parent's script
    directory or working directory, a user's home perhaps) and the user site-packages."""
    root = str(project_root())
    paths = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(sys.executable),
        os.path.dirname(os.path.realpath(sys.executable)),
    }
    paths.update(entry for entry in sys.path[1:] if entry)
    paths.discard(site.getusersitepackages())
    kept = []
    for path in paths:
        if not os.path.isabs(path) or not os.path.exists(path):
            continue
        if path == "/" or _under(root, path):
            continue
        kept.append(path)
    return kept


def pythonpath_entries() -> list[str]:
    """The parent's PYTHONPATH entries that `python_paths` binds, in import order: `python -I`
    drops PYTHONPATH, so the child's bootstrap puts them back (packages installed with
    `pip --target`, as the GPU image's carried wheels are, would otherwise vanish)."""
    named = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    bound = set(python_paths())
    return [p for p in sys.path[1:] if p in named and p in bound]


def tool_paths() -> list[str]:
    """Outside /usr (bound whole), under /opt only: directories LD_LIBRARY_PATH, CUDA_HOME and
    CUDA_PATH name, and the install prefix of the compilers named by CC, CXX and CUDAHOSTCXX
    or found on PATH (the GPU image's GCC lives in /opt/gcc: Triton and load_inline call it)."""
    named = os.environ.get("LD_LIBRARY_PATH", "").split(":")
    named += [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", "")]
    tools = [os.environ.get(name, "") for name in ("CC", "CXX", "CUDAHOSTCXX")]
    tools += ["cc", "c++", "gcc", "g++", "nvcc", "ninja"]
    for tool in filter(None, tools):
        found = shutil.which(tool)
        if found is None:
            continue
        for path in {found, os.path.realpath(found)}:
            folder = os.path.dirname(path)
            named.append(os.path.dirname(folder) if os.path.basename(folder) == "bin" else folder)
    return sorted({p for p in named if p.startswith(EXTRA_ROOTS) and os.path.isdir(p)})


def gpu_device_nodes() -> list[str]:
    return sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/dri/*"))


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _outermost(paths: Iterable[str]) -> list[str]:
    """Real paths, without those inside another one of the set."""
    real = sorted({os.path.realpath(p) for p in paths})
    kept: list[str] = []
    for path in real:
        if not any(_under(path, outer) for outer in kept):
            kept.append(path)
    return kept


def reachable(path: str, uid: int, gid: int) -> bool:
    """Whether uid/gid (no supplementary groups) may traverse every directory above path."""
    parts = Path(path).parents
    for parent in parts:
        try:
            info = os.stat(parent)
        except OSError:
            return False
        if info.st_uid == uid:
            bit = stat.S_IXUSR
        elif info.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return False
    return True


def _data_fd(text: str) -> int:
    fd = os.memfd_create("kernel-agent-jail", 0)
    os.write(fd, text.encode())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def plan_command(
    jail: Jail,
    argv: Sequence[str],
    *,
    workdir: Path,
    cache_dir: Path | None,
    device: str,
    tmpfs_bytes: int,
    nproc: int | None,
    seccomp_fd: int | None,
    read_only: Iterable[str] = (),
) -> JailPlan:
    """The bubblewrap command that runs argv jailed. `nproc`, in an RLIMIT_NPROC mode, is set
    inside the jail by a tiny exec wrapper: after bubblewrap has made the user namespace, so
    the kernel counts this jail's tasks alone."""
    plan = JailPlan(argv=[jail.bwrap], drop_ids=jail.mode == NOBODY)
    command = plan.argv
    stage_sources: list[str] = []

    def source(path: str) -> str:
        """In `nobody` mode a source uid 65534 cannot reach is staged by root first."""
        if jail.mode != NOBODY or reachable(path, SANDBOX_ID, SANDBOX_ID):
            return path
        stage_sources.append(path)
        return f"@stage{len(stage_sources) - 1}"

    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            command += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            command += ["--ro-bind", path, path]
    command += ["--perms", "0755", "--dir", "/etc"] if jail.has("--perms") else ["--dir", "/etc"]
    for name in ETC_ENTRIES:
        path = f"/etc/{name}"
        if os.path.lexists(path):
            command += ["--ro-bind", path, path]
    ident = jail.inner_id
    for name, text in (
        ("passwd", f"sandbox:x:{ident}:{ident}:kernel-agent sandbox:/tmp/home:/sbin/nologin\n"),
        ("group", f"sandbox:x:{ident}:\n"),
        ("nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n"),
        ("hosts", "127.0.0.1 localhost sandbox\n::1 localhost\n"),
    ):
        fd = _data_fd(text)
        plan.pass_fds.append(fd)
        if jail.has("--perms"):
            command += ["--perms", "0644"]
        command += ["--ro-bind-data", str(fd), f"/etc/{name}"]
    # /dev: bubblewrap's minimal one, the GPU's nodes for CUDA, a sized /dev/shm; then
    # read-only, or it would be an unbounded tmpfs to fill.
    command += ["--dev", "/dev"]
    if device == "cuda":
        for node in gpu_device_nodes():
            command += ["--dev-bind", node, node]
    command += [*_sized(jail, max(tmpfs_bytes // 8, 64 * 1024**2)), "--tmpfs", "/dev/shm"]
    command += ["--remount-ro", "/dev", "--proc", "/proc"]
    if device == "cuda":
        command += ["--ro-bind", "/sys", "/sys"]
    if jail.has("--perms"):
        command += ["--perms", "01777"]
    command += [*_sized(jail, tmpfs_bytes), "--tmpfs", "/tmp", "--dir", "/tmp/home"]
    extra = [*python_paths(), *tool_paths(), *read_only, *shipped_package_dirs()]
    for path in _outermost(p for p in extra if not _under(os.path.realpath(p), "/usr")):
        command += ["--ro-bind", source(path), path]
    for path in [workdir, *([cache_dir] if cache_dir is not None else [])]:
        command += ["--bind", source(str(path)), str(path)]
    command += ["--remount-ro", "/"]  # the root is a tmpfs bubblewrap made: writable else
    command += _namespace_options(jail)
    if seccomp_fd is not None:
        command += ["--seccomp", str(seccomp_fd)]
        plan.pass_fds.append(seccomp_fd)
    command += ["--chdir", str(workdir), "--"]
    if nproc is not None and jail.rlimit_nproc:
        command += [sys.executable, "-I", "-S", "-c", NPROC_WRAPPER, str(nproc)]
    command += list(argv)
    if stage_sources:
        _stage(plan, stage_sources)
    return plan


NPROC_WRAPPER = (
    "import os, resource, sys; n = int(sys.argv[1]); "
    "resource.setrlimit(resource.RLIMIT_NPROC, (n, n)); os.execvp(sys.argv[2], sys.argv[2:])"
)


def _sized(jail: Jail, size: int) -> list[str]:
    """--size for the next tmpfs, where this bubblewrap knows it."""
    return ["--size", str(size)] if jail.has("--size") else []


def _namespace_options(jail: Jail) -> list[str]:
    options = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    options += ["--hostname", "sandbox"]
    if jail.has("--unshare-cgroup-try"):
        options.append("--unshare-cgroup-try")
    if jail.mode != ROOT:
        options.append("--unshare-user")
        if jail.mode in (NOBODY, ROOT_USERNS):
            options += ["--uid", str(SANDBOX_ID), "--gid", str(SANDBOX_ID)]
        if jail.has("--disable-userns"):
            options.append("--disable-userns")
    if jail.mode in (ROOT, ROOT_USERNS):
        options += ["--cap-drop", "ALL"]
    options += ["--new-session", "--die-with-parent"]
    return options


def _stage(plan: JailPlan, sources: list[str]) -> None:
    """Mountpoints root binds the unreachable sources on, in the child's own mount namespace
    (see agents.sandbox.privileges.drop_and_stage); the command then names them as sources."""
    stage_dir = tempfile.mkdtemp(prefix="kernel-agent-stage-")
    os.chmod(stage_dir, 0o711)
    plan.stage_dir = stage_dir
    for index, path in enumerate(sources):
        target = os.path.join(stage_dir, str(index))
        if os.path.isdir(path):
            os.mkdir(target, 0o700)
        else:
            Path(target).touch(0o600)
        plan.stage.append((path, target))
        plan.argv[plan.argv.index(f"@stage{index}")] = target
