"""The system-call filter every sandboxed child runs under.

Capabilities and namespaces already stop a jailed candidate from mounting, tracing or loading
modules; the filter is the second wall, for the day one of those is misconfigured, and the
only wall when the user runs without the jail (--no-jail). Its default is to allow: it refuses
(EPERM) the calls that reconfigure the kernel or reach other processes, answers `clone3` with
ENOSYS so glibc falls back to `clone`, whose flags a filter can read, and refuses `clone` with
namespace flags.

The general filter is compiled by libseccomp (through `pyseccomp`) in the parent and exported
as BPF: bubblewrap loads it from a file descriptor (`--seccomp FD`), and a child started
without the jail loads the same bytes with prctl before exec. Without the jail the child also
gets a hand-written kill filter: signals may only go to the child itself or its own process
group, so a candidate cannot kill the CLI that judges it, and it cannot leave its session,
whose every process the parent kills at the end.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import platform
import struct
import sys

log = logging.getLogger(__name__)

REFUSED = (
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "unshare",
    "setns",
    "init_module",
    "finit_module",
    "delete_module",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "quotactl",
    "open_by_handle_at",
    "userfaultfd",
    "sched_setaffinity",  # a candidate must not widen the CPU set it was pinned to
    "io_uring_setup",
    "syslog",
    "uselib",
)
"""Refused with EPERM. The new mount API (open_tree, fsopen, ...) is here too: refusing
mount(2) alone would leave it open."""

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACE_FLAGS = (
    CLONE_NEWNS,
    CLONE_NEWCGROUP,
    CLONE_NEWUTS,
    CLONE_NEWIPC,
    CLONE_NEWUSER,
    CLONE_NEWPID,
    CLONE_NEWNET,
)

# Classic BPF, as seccomp reads it: struct sock_filter {u16 code; u8 jt, jf; u32 k}.
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

# Per architecture: the audit arch, the x32 bit to refuse (x86_64 only) and the numbers of
# the calls the kill filter reads. Only the arches the product runs on.
_ARCHES = {
    "x86_64": (
        0xC000003E,
        0x40000000,
        {"kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129},
        {"rt_tgsigqueueinfo": 297, "pidfd_send_signal": 424, "setsid": 112},
    ),
    "aarch64": (
        0xC00000B7,
        0,
        {"kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138},
        {"rt_tgsigqueueinfo": 240, "pidfd_send_signal": 424, "setsid": 157},
    ),
}


@functools.cache
def general_filter() -> bytes | None:
    """The general filter as BPF bytes, or None (with one warning) where libseccomp is
    missing. Compiled once per process, in the parent: a forked child must not allocate."""
    reason = _unavailable_reason()
    if reason is not None:
        log.warning("kernel-agent: %s; candidates run without a system-call filter", reason)
        return None
    import pyseccomp as sc

    flt = sc.SyscallFilter(sc.ALLOW)
    for name in REFUSED:
        _refuse(sc, flt, sc.ERRNO(errno.EPERM), name)
    _refuse(sc, flt, sc.ERRNO(errno.ENOSYS), "clone3")
    for flag in NAMESPACE_FLAGS:
        _refuse(sc, flt, sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    fd = os.memfd_create("kernel-agent-seccomp")
    try:
        flt.export_bpf(_FdFile(fd))
        os.lseek(fd, 0, os.SEEK_SET)
        return _read_all(fd)
    finally:
        os.close(fd)


def _refuse(sc, flt, action: int, name: str, *args) -> None:
    """Add one rule; a call this kernel's libseccomp does not know is skipped (it cannot be
    made on this architecture either)."""
    if sc.resolve_syscall(sc.Arch.NATIVE, name) < 0:
        return
    flt.add_rule(action, name, *args)


class _FdFile:
    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


@functools.cache
def _unavailable_reason() -> str | None:
    if not sys.platform.startswith("linux"):
        return "seccomp exists only on Linux"
    try:
        import pyseccomp  # noqa: F401
    except ImportError:
        return "the pyseccomp package is not installed (pip install pyseccomp)"
    except (OSError, RuntimeError):
        return "libseccomp cannot be loaded (apt-get install libseccomp2 / dnf install libseccomp)"
    return None


def unavailable_reason() -> str | None:
    """Why no filter applies here, or None when it does."""
    return _unavailable_reason() or (None if general_filter() is not None else "no filter")


def filter_fd() -> int | None:
    """A fresh memfd holding the general filter, positioned at its start, for bubblewrap's
    `--seccomp FD` (bubblewrap reads and closes its copy). The caller closes its own."""
    program = general_filter()
    if program is None:
        return None
    fd = os.memfd_create("kernel-agent-seccomp", 0)  # inheritable only through pass_fds
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def kill_filter(pid: int, machine: str | None = None) -> bytes | None:
    """BPF that lets kill/tkill/tgkill/rt_sig(tg)queueinfo reach only `pid` itself, its group
    (-pid, 0) or nobody (signal 0 with kill), refuses pidfd_send_signal and setsid (so the
    session stays whole for the final kill; `quota.kill_session`), and refuses other ABIs'
    calls. setpgid stays allowed: ninja starts every compiler in a group of its own
    (POSIX_SPAWN_SETPGROUP), and a group can only be made or joined inside the caller's own
    session. Only the low 32 bits of the pid argument are read: the kernel reads no more.
    None on an architecture it does not know."""
    spec = _ARCHES.get(machine or platform.machine())
    if spec is None:
        return None
    arch, x32_bit, pid_calls, other = spec
    own, group = pid & 0xFFFFFFFF, -pid & 0xFFFFFFFF
    deny = SECCOMP_RET_ERRNO | errno.EPERM
    # Layout: header, dispatch, then the checks; jumps are relative to the next instruction.
    program: list[tuple[int, int, int, int]] = [(_LD_W_ABS, 0, 0, 4)]
    header = [(_JEQ_K, 1, 0, arch), (_RET_K, 0, 0, deny), (_LD_W_ABS, 0, 0, 0)]
    if x32_bit:
        header += [(_JGE_K, 0, 1, x32_bit), (_RET_K, 0, 0, deny)]
    program += header
    dispatch_names = [*pid_calls, "rt_tgsigqueueinfo", "pidfd_send_signal", "setsid"]
    numbers = {**pid_calls, **other}
    dispatch_start = len(program)
    allow_tail = dispatch_start + len(dispatch_names)  # ret ALLOW
    kill_check = allow_tail + 1  # ld sig; jeq 0 -> allow
    pid_check = kill_check + 2  # ld arg0; jeq own/0/group -> allow; ret deny
    deny_at = pid_check + 4
    allow_at = deny_at + 1
    for index, name in enumerate(dispatch_names):
        here = dispatch_start + index
        if name == "kill":
            target = kill_check
        elif name in ("pidfd_send_signal", "setsid"):
            target = deny_at
        else:
            target = pid_check
        program.append((_JEQ_K, target - here - 1, 0, numbers[name]))
    program.append((_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    program += [(_LD_W_ABS, 0, 0, 24), (_JEQ_K, allow_at - (kill_check + 1) - 1, 0, 0)]
    program += [
        (_LD_W_ABS, 0, 0, 16),
        (_JEQ_K, allow_at - (pid_check + 1) - 1, 0, own),
        (_JEQ_K, allow_at - (pid_check + 2) - 1, 0, 0),
        (_JEQ_K, allow_at - (pid_check + 3) - 1, 0, group),
    ]
    program += [(_RET_K, 0, 0, deny), (_RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    assert len(program) == allow_at + 1
    return b"".join(struct.pack("=HBBI", *insn) for insn in program)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _load_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


_PRCTL = _load_prctl()


class Loader:
    """Filters loaded in the forked child before exec. The general filter's bytes and the
    machine are prepared in the parent; the kill filter needs the child's own pid, so the
    child packs it (plain Python on modules already imported: no library is loaded there)."""

    def __init__(self, general: bytes | None, *, kill_filter: bool) -> None:
        self._general = general
        self._kill = kill_filter
        self._machine = platform.machine()
        self._keep: list[object] = []

    @property
    def kill_filter_supported(self) -> bool:
        return kill_filter(1, self._machine) is not None

    def load(self) -> None:
        """In the child: no_new_privs, then each filter. Raises OSError when refused."""
        programs = [self._general] if self._general else []
        if self._kill:
            own = kill_filter(os.getpid(), self._machine)
            if own is not None:
                programs.append(own)
        if not programs:
            return
        if _PRCTL is None:
            raise OSError(errno.ENOSYS, "prctl is not available")
        if _PRCTL(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
        for program in programs:
            buffer = ctypes.create_string_buffer(program, len(program))
            prog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
            self._keep += [buffer, prog]
            if _PRCTL(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")
