"""The jail holds against a hostile payload run as root and as a normal user: no capability,
no mount, no host secret, no write outside its directories, no credential in its environment,
no namespace or tracing, a process cap, a sized /tmp, a cache quota, and without the jail
(--no-jail) no signal to anything but itself. Each payload is a few lines of Python started
through `launch()` (not a whole evaluation), so a failure names the wall that fell."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from agents.sandbox import jail as jail_module
from agents.sandbox import launch as launch_module
from agents.sandbox import seccomp
from agents.sandbox.jail import Jail, bwrap_options, find_jail, probe
from agents.sandbox.launch import JailUnavailable, Launched, LaunchSpec, Limits, launch
from agents.sandbox.quota import ProcessTable

BWRAP = shutil.which("bwrap")
requires_bwrap = pytest.mark.skipif(BWRAP is None, reason="bubblewrap (bwrap) is not installed")
requires_jail = pytest.mark.skipif(
    find_jail() is None, reason="bubblewrap is not installed or cannot run here"
)
requires_seccomp = pytest.mark.skipif(
    seccomp.unavailable_reason() is not None, reason="libseccomp/pyseccomp is not available"
)
requires_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
SECRETS = {
    "GITHUB_PAT": "ghp_jailtest0123456789",
    "DATABASE_URL": "postgres://user:jailtest-pw@db/prod",
    "SLACK_WEBHOOK_URL": "https://hooks.example/jailtest",
    "ANTHROPIC_API_KEY": "sk-ant-jailtest-0123",
    "FOO": "bar-jailtest",
}
PREAMBLE = """
import ctypes, errno, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def err(call, *args):
    result = call(*args)
    return "ok" if result == 0 else errno.errorcode.get(ctypes.get_errno(), "?")
def attempt(action):
    try:
        action()
        return "ok"
    except OSError as error:
        return errno.errorcode.get(error.errno, str(error.errno))
def read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("latin-1")
    except OSError:
        return None
def write(path):
    with open(path, "w") as handle:
        handle.write("escaped")
"""

_PROBED: dict[str, Jail | None] = {}


@pytest.fixture(params=["nobody", "root-userns", "root"] if os.geteuid() == 0 else ["user"])
def any_mode(request, monkeypatch) -> Jail:
    """The jail forced into each mode this user has, or a skip when that mode cannot start."""
    if BWRAP is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    if request.param not in _PROBED:
        jail = Jail(BWRAP, request.param, bwrap_options(BWRAP))
        _PROBED[request.param] = jail if probe(jail) is None else None
    if (jail := _PROBED[request.param]) is None:
        pytest.skip(f"jail mode {request.param} cannot start here")
    monkeypatch.setattr(launch_module, "find_jail", lambda: jail)
    return jail


class Run:
    """One payload's launch: its report (the last stdout line), exit status, stderr, peak."""

    def __init__(self, launched: Launched, stdout: bytes, stderr: bytes, peak: int):
        self.launched, self.peak, self.returncode = launched, peak, launched.process.returncode
        self.stderr = stderr.decode("utf-8", "replace")
        lines = stdout.decode("utf-8", "replace").strip().splitlines() or ["{}"]
        self.report = json.loads(lines[-1]) if lines[-1].startswith("{") else {}


def run_payload(
    body: str,
    tmp_path: Path,
    *,
    jail: bool = True,
    limits: Limits | None = None,
    timeout: float = 120,
    env_extra: dict[str, str] | None = None,
) -> Run:
    """Launch `python -I -c PREAMBLE+body` and wait for it, sampling the jail's task count;
    the body fills `out`, which is printed as the report."""
    code = PREAMBLE + textwrap.dedent(body) + "\nprint(json.dumps(out), flush=True)\n"
    spec = LaunchSpec(
        argv=[sys.executable, "-I", "-c", code],
        device="cpu",
        threads=1,
        workdir=Path(tempfile.mkdtemp(prefix="jail-work-", dir=tmp_path)),
        cache_dir=tmp_path / f"cache-{secrets.token_hex(4)}",
        env_extra=env_extra or {},
        jail=jail,
        limits=limits or Limits(address_space_bytes=8 * 1024**3),
    )
    launched = launch(spec)
    peak, deadline = 0, time.monotonic() + timeout
    try:
        while launched.process.poll() is None and time.monotonic() < deadline:
            peak = max(peak, ProcessTable.read().tasks_below(launched.process.pid))
            time.sleep(0.05)
        stdout, stderr = launched.process.communicate(timeout=max(deadline - time.monotonic(), 1))
    finally:
        launched.close()
    return Run(launched, stdout, stderr, peak)


# --- every mode: capabilities, mounts, namespaces -------------------------------------------


def test_capabilities_mounts_network_and_cpus(any_mode: Jail, tmp_path: Path):
    run = run_payload(
        """
        status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
        for key in ("CapEff", "CapPrm", "CapAmb", "NoNewPrivs", "Seccomp"):
            out[key] = status[key].strip()
        MS_REMOUNT, MS_BIND = 32, 4096
        out["mount_tmpfs"] = err(libc.mount, b"none", b"/mnt", b"tmpfs", 0, None)
        out["remount_root_rw"] = err(libc.mount, b"none", b"/", None, MS_REMOUNT, None)
        out["remount_usr_rw"] = err(libc.mount, b"none", b"/usr", None, MS_REMOUNT | MS_BIND, None)
        out["umount_tmp"] = err(libc.umount2, b"/tmp", 2)
        out["umount_proc"] = err(libc.umount2, b"/proc", 0)
        out["ptrace_traceme"] = err(libc.ptrace, 0, 0, None, None)
        out["unshare_user"] = err(libc.unshare, 0x10000000)
        out["unshare_mount"] = err(libc.unshare, 0x00020000)
        out["chroot"] = err(libc.chroot, b"/tmp")
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        out["fork"] = os.waitpid(pid, 0)[1] >> 8
        out["fds"] = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
        out["cpus"] = sorted(os.sched_getaffinity(0))
        out["widen"] = attempt(lambda: os.sched_setaffinity(0, set(range(os.cpu_count()))))
        import getpass, socket
        out["user"] = getpass.getuser()
        out["connect"] = attempt(lambda: socket.create_connection(("1.1.1.1", 53), timeout=2))
        """,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    report, no_caps = run.report, "0000000000000000"
    assert (report["CapEff"], report["CapPrm"], report["CapAmb"]) == (no_caps,) * 3
    assert report["NoNewPrivs"] == "1" and report["fork"] == 7  # an honest fork still works
    refused = [key for key in report if key.startswith(("mount", "remount", "umount"))]
    refused += ["ptrace_traceme", "chroot", "unshare_user", "unshare_mount"]
    assert {key: report[key] for key in refused} == dict.fromkeys(refused, "EPERM")
    if seccomp.unavailable_reason() is None:
        assert report["Seccomp"] == "2"
    assert report["fds"] == [0, 1, 2, 3]  # 3 is listdir's own: no data or filter fd is left
    assert len(report["cpus"]) == 1 and report["widen"] == "EPERM"  # pinned, and stays so
    assert report["user"] == "sandbox" and report["connect"] != "ok"  # no network
    assert "capabilities dropped" in run.launched.isolation
    assert f"[{any_mode.mode}]" in run.launched.isolation


@pytest.fixture
def host_secrets(tmp_path: Path):
    """A secret file under /root and one in a sibling directory of the project root."""
    token = secrets.token_hex(6)
    root_file = Path("/root") / f"kernel-agent-jail-test-{token}"
    if os.geteuid() == 0:
        root_file.write_text("root-secret")
    sibling = jail_module.project_root().parent / f"kernel-agent-jail-sibling-{token}"
    try:
        sibling.mkdir()
    except OSError:  # not ours to write: a directory outside the project stands in
        sibling = Path(tempfile.mkdtemp(prefix="kernel-agent-jail-outside-"))
    (sibling / "secret.txt").write_text("sibling-secret")
    yield {"root": root_file, "sibling": sibling / "secret.txt"}
    root_file.unlink(missing_ok=True)
    shutil.rmtree(sibling, ignore_errors=True)


def test_host_files_are_unreadable_and_unwritable(any_mode, tmp_path, host_secrets):
    project = jail_module.project_root()
    readable = ["/etc/shadow", str(host_secrets["root"]), str(host_secrets["sibling"])]
    readable += [str(project / "pyproject.toml"), str(project / ".git" / "config")]
    writable = ["/escape.txt", "/etc/escape.txt", "/usr/escape.txt", "/root/escape.txt"]
    writable += [str(project / "agents" / "escape.txt"), f"{sys.prefix}/escape.txt"]
    writable += ["/dev/escape.txt", str(host_secrets["sibling"].parent / "escape.txt")]
    run = run_payload(
        f"""
        out["read"] = {{p: read(p) for p in {readable!r}}}
        out["write"] = {{p: attempt(lambda p=p: write(p)) for p in {writable!r}}}
        allowed = [os.getcwd(), os.environ["HOME"], "/tmp", os.environ["TORCH_EXTENSIONS_DIR"]]
        allowed.append("/dev/shm")
        os.makedirs(os.environ["TORCH_EXTENSIONS_DIR"], exist_ok=True)
        out["allowed"] = {{p: attempt(lambda p=p: write(p + "/ok.txt")) for p in allowed}}
        out["passwd"] = open("/etc/passwd").read()
        out["root_listing"] = sorted(os.listdir("/"))
        out["beside"] = sorted(os.listdir({str(project.parent)!r}))
        out["project"] = sorted(os.listdir({str(project)!r}))
        """,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert run.report["read"] == dict.fromkeys(readable), "readable inside the jail"
    assert "ok" not in run.report["write"].values(), run.report["write"]
    assert all(outcome == "ok" for outcome in run.report["allowed"].values()), run.report
    assert not Path("/escape.txt").exists() and not (project / "agents" / "escape.txt").exists()
    assert run.report["passwd"].count("\n") == 1 and "root:" not in run.report["passwd"]
    assert not {"home", "srv", "mnt", "media", "var"} & set(run.report["root_listing"])
    assert run.report["beside"] == [project.name]  # no sibling checkout, no shared/
    assert not {".git", "tests", "pyproject.toml"} & set(run.report["project"])


def test_credentials_never_reach_the_child(any_mode, tmp_path, monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    run = run_payload(
        """
        out["env"] = sorted(os.environ)
        out["environ"] = [read(f"/proc/{pid}/environ") for pid in (1, "self", os.getppid())]
        """,
        tmp_path,
        env_extra={"CUDA_VISIBLE_DEVICES": "0", "GITHUB_TOKEN_EXTRA": "ghp_extra-jailtest"},
    )
    assert run.returncode == 0, run.stderr
    assert not {*SECRETS, "GITHUB_TOKEN_EXTRA"} & set(run.report["env"])
    assert "jailtest" not in json.dumps(run.report) and "HOME=" in run.report["environ"][1]
    assert "CUDA_VISIBLE_DEVICES" in run.report["env"]


def leftovers(marker: str) -> list[int]:
    """Processes whose command line holds `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
    return found


FORK_LOOP = """
# {marker}
import time
made = 0
try:
    for _ in range(3000):  # bounded: a cap that failed must not take the machine down
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        made += 1
except OSError as error:
    out["stopped"] = errno.errorcode.get(error.errno)
out["made"] = made
"""


def fork_loop(tmp_path: Path, *, jail: bool, rlimit: bool) -> None:
    """A fork loop stops at the cap: EAGAIN where RLIMIT_NPROC holds, else killed by the
    watcher; either way nothing of it is left afterwards."""
    limits = Limits(address_space_bytes=8 * 1024**3, max_processes=16)
    marker = f"fork-loop-{secrets.token_hex(6)}"
    run = run_payload(FORK_LOOP.format(marker=marker), tmp_path, jail=jail, limits=limits)
    if rlimit:
        assert run.returncode == 0, run.stderr
        assert run.report["stopped"] == "EAGAIN"
        assert run.report["made"] <= launch_module.process_cap(1, limits)
    else:
        assert run.returncode != 0 and "process cap" in (run.launched.killed_for or "")
    time.sleep(0.5)
    assert leftovers(marker) == []


def test_fork_loop_stops_at_the_cap(any_mode, tmp_path):
    fork_loop(tmp_path, jail=True, rlimit=any_mode.rlimit_nproc)


def test_tmp_is_a_sized_private_tmpfs(any_mode, tmp_path):
    limits = Limits(address_space_bytes=8 * 1024**3, tmpfs_bytes=32 * 1024**2)
    run = run_payload(
        """
        chunk = b"x" * (1 << 20)
        written = 0
        try:
            with open("/tmp/big", "wb") as handle:
                for _ in range(64):
                    handle.write(chunk)
                    handle.flush()
                    written += 1
        except OSError as error:
            out["error"] = errno.errorcode.get(error.errno)
        out["written_mib"] = written
        out["tmp_entries"] = sorted(os.listdir("/tmp"))
        """,
        tmp_path,
        limits=limits,
    )
    assert run.returncode == 0, run.stderr
    assert run.report["error"] == "ENOSPC" and run.report["written_mib"] < 33
    # Besides the child's own files: the bound folders that live under /tmp on this machine
    # (pytest's tmp_path; a checkout or venv cloned under /tmp, as CI's clean clone is).
    bound = [tmp_path, jail_module.project_root(), Path(sys.prefix)]
    under_tmp = {p.parts[2] for p in map(Path, bound) if p.parts[1:2] == ("tmp",)}
    assert set(run.report["tmp_entries"]) <= {"big", "home"} | under_tmp


def test_cache_quota_kills_the_child_and_empties_the_cache(any_mode, tmp_path):
    limits = Limits(address_space_bytes=8 * 1024**3, cache_bytes=8 * 1024**2)
    run = run_payload(
        """
        import time
        where = os.environ["TORCH_EXTENSIONS_DIR"]
        os.makedirs(where, exist_ok=True)
        for index in range(32):
            with open(os.path.join(where, f"blob{index}"), "wb") as handle:
                handle.write(os.urandom(1 << 20))
        time.sleep(20)
        out["survived"] = True
        """,
        tmp_path,
        limits=limits,
        timeout=60,
    )
    assert run.returncode == -signal.SIGKILL
    assert run.launched.cache_over_quota()
    assert "cache over its quota" in (run.launched.killed_for or "")
    assert run.launched.cache_dir is not None and not any(run.launched.cache_dir.iterdir())


# --- the default mode: torch and the compilers work with the reduced binds ------------------


@requires_jail
def test_torch_works_inside(tmp_path):
    run = run_payload(
        """
        import torch
        out["dot"] = float(torch.ones(4) @ torch.ones(4))
        out["threads"] = torch.get_num_threads()
        """,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert run.report == {"dot": 4.0, "threads": 1}


@requires_jail
def test_the_children_can_import_agents_and_memory_but_not_server(tmp_path):
    """The offline child's CUDA path imports memory/tuning.py (triton-gemm's remembered
    tiles): memory/ must be bound beside agents/, and server/ never."""
    import agents.sandbox.jail as jail_module

    run = run_payload(
        f"""
        import importlib
        sys.path[0:0] = [{str(jail_module.project_root())!r}]
        import memory.tuning, agents.offline.passes.triton_gemm_tuning
        out["memory"] = memory.tuning.__name__
        try:
            importlib.import_module("server.app")
            out["server"] = "imported"
        except ImportError:
            out["server"] = "absent"
        """,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert run.report == {"memory": "memory.tuning", "server": "absent"}


@requires_jail
@pytest.mark.slow
def test_compilers_work_inside_within_the_process_cap(tmp_path):
    """load_inline (g++ through ninja) and torch.compile (Inductor's C++ backend) work with
    the reduced binds, and the honest peak task count sits well under the cap (the figure
    PROCESS_HEADROOM documents)."""
    limits = Limits(address_space_bytes=16 * 1024**3)
    run = run_payload(
        """
        import torch
        from torch.utils.cpp_extension import load_inline
        source = "at::Tensor add_one(at::Tensor x) { return x + 1; }"
        module = load_inline(name="jail_add_one", cpp_sources=source, functions=["add_one"])
        out["inline"] = module.add_one(torch.zeros(3)).tolist()
        compiled = torch.compile(lambda x: torch.sin(x) * 2 + 1)
        out["compiled"] = round(float(compiled(torch.zeros(8)).sum()), 3)
        """,
        tmp_path,
        limits=limits,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.report == {"inline": [1.0, 1.0, 1.0], "compiled": 8.0}
    cap = launch_module.process_cap(1, limits)
    print(f"peak tasks {run.peak} (cap {cap})")
    assert 0 < run.peak < cap - limits.max_processes // 2


# --- without the jail ------------------------------------------------------------------------


@requires_seccomp
def test_without_the_jail_the_child_cannot_signal_the_cli(tmp_path):
    """Harmless signals first: only when they are refused does the payload try SIGKILL, so a
    filter that failed cannot take the test run (or, as root, the machine) down with it."""
    run = run_payload(
        """
        import signal
        probes = {
            "parent_cont": lambda: os.kill(os.getppid(), signal.SIGCONT),
            "all_cont": lambda: os.kill(-1, signal.SIGCONT),
            "parent_group_cont": lambda: os.killpg(os.getpgid(os.getppid()), signal.SIGCONT),
        }
        out["probes"] = {name: attempt(action) for name, action in probes.items()}
        if all(result == "EPERM" for result in out["probes"].values()):
            out["parent_kill"] = attempt(lambda: os.kill(os.getppid(), signal.SIGKILL))
            out["all_kill"] = attempt(lambda: os.kill(-1, signal.SIGKILL))
        out["self"] = attempt(lambda: os.kill(os.getpid(), 0))
        out["own_group"] = attempt(lambda: os.killpg(0, signal.SIGCONT))
        out["setsid"] = attempt(os.setsid)
        out["mount"] = err(libc.mount, b"none", b"/mnt", b"tmpfs", 0, None)
        out["cpus"] = sorted(os.sched_getaffinity(0))
        """,
        tmp_path,
        jail=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.report["probes"] == dict.fromkeys(run.report["probes"], "EPERM")
    assert run.report["parent_kill"] == "EPERM" and run.report["all_kill"] == "EPERM"
    assert run.report["self"] == "ok" and run.report["own_group"] == "ok"
    assert run.report["setsid"] == "EPERM" and run.report["mount"] == "EPERM"
    assert len(run.report["cpus"]) == 1
    assert run.launched.isolation.startswith("no jail (--no-jail)")


@requires_seccomp
def test_without_the_jail_a_process_group_of_its_own_is_allowed_and_still_killed(tmp_path):
    """ninja starts each compiler with POSIX_SPAWN_SETPGROUP: refusing setpgid broke every C++
    extension build without the jail (CI, 2026-12-04). A group may be made, but the session
    may not be left, and closing the child kills the new group's sleeper too."""
    marker = f"own-group-{secrets.token_hex(6)}"
    run = run_payload(
        f"""
        import subprocess
        sleeper = [sys.executable, "-c", "import time  # {marker}\\ntime.sleep(120)"]
        quiet = [(os.POSIX_SPAWN_OPEN, fd, "/dev/null", os.O_WRONLY, 0) for fd in (1, 2)]
        pid = os.posix_spawn(
            sys.executable, sleeper, dict(os.environ), setpgroup=0, file_actions=quiet
        )
        out["spawned_group_is_own"] = os.getpgid(pid) == pid
        out["setsid"] = attempt(os.setsid)
        done = subprocess.run([sys.executable, "-c", "import os; os.setpgid(0, 0)"])
        out["child_setpgid"] = done.returncode
        """,
        tmp_path,
        jail=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.report == {
        "spawned_group_is_own": True,
        "setsid": "EPERM",
        "child_setpgid": 0,
    }
    deadline = time.monotonic() + 5
    while leftovers(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers(marker) == []


@requires_seccomp
def test_without_the_jail_a_fork_loop_is_capped_too(tmp_path):
    # RLIMIT_NPROC does not bind root: there the watcher kills the child's session
    fork_loop(tmp_path, jail=False, rlimit=os.geteuid() != 0)


def test_without_libseccomp_the_verdict_says_so(tmp_path, monkeypatch):
    """A missing libseccomp is said, not fatal: the jail's namespaces and dropped
    capabilities still apply, and so does the hand-written kill filter without it."""
    monkeypatch.setattr(seccomp, "general_filter", lambda: None)
    monkeypatch.setattr(seccomp, "filter_fd", lambda: None)
    monkeypatch.setattr(seccomp, "_unavailable_reason", lambda: "libseccomp cannot be loaded")
    run = run_payload("out['ok'] = True", tmp_path, jail=False)
    assert run.returncode == 0 and run.report == {"ok": True}, run.stderr
    assert "NO seccomp filter (libseccomp cannot be loaded)" in run.launched.isolation
    if find_jail() is not None:
        run = run_payload(
            "out['cap'] = open('/proc/self/status').read().split('CapEff:')[1].split()[0]",
            tmp_path,
        )
        assert run.report == {"cap": "0000000000000000"}
        assert "NO seccomp filter" in run.launched.isolation


def test_jail_asked_for_but_bubblewrap_hidden_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap there
    fresh = jail_module._find_jail.__wrapped__
    monkeypatch.setattr(jail_module, "find_jail", lambda: fresh())
    monkeypatch.setattr(launch_module, "find_jail", lambda: fresh())
    with pytest.raises(JailUnavailable) as caught:
        launch(LaunchSpec(argv=[sys.executable], device="cpu", threads=1, workdir=tmp_path))
    message = str(caught.value)
    assert "bubblewrap" in message and "--no-jail" in message and "\n" not in message
    assert "apt-get install bubblewrap" in message


# --- as a normal user --------------------------------------------------------------------------


USER_DRIVER = """
import json, os, sys, tempfile
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])
from pathlib import Path
from agents.sandbox.jail import find_jail
from agents.sandbox.launch import launch, LaunchSpec, Limits
jail = find_jail()
limits = Limits(max_processes=16, address_space_bytes=8 << 30)
argv = [sys.executable, "-I", "-c", sys.argv[3]]
spec = LaunchSpec(argv=argv, device="cpu", threads=1, workdir=Path(tempfile.mkdtemp()),
                  limits=limits)
launched = launch(spec)
out, err = launched.process.communicate(timeout=60)
launched.close()
print(json.dumps({"mode": jail.mode if jail else None, "isolation": launched.isolation,
                  "child": out.decode(), "err": err.decode()[-500:]}))
"""
USER_PAYLOAD = (
    PREAMBLE
    + FORK_LOOP.format(marker="user-mode")
    + "out['CapEff'] = open('/proc/self/status').read().split('CapEff:')[1].split()[0]\n"
    + "out['uid'] = os.getuid()\nprint(json.dumps(out))\n"
)


@requires_root
@requires_bwrap
def test_as_a_normal_user_the_jail_holds_too(tmp_path):
    """The non-root path, run for real: the system Python as uid 65534 starts a launch of its
    own (user mode), whose child has no capability and stops at RLIMIT_NPROC."""
    python = shutil.which("python3", path="/usr/bin")
    if python is None:
        pytest.skip("no system /usr/bin/python3 to run as another user")
    # Copies that uid can read wherever the checkout and venv live (a 0700 folder, as CI's
    # clone in a mktemp folder is): the agents package, and pyseccomp alone for that Python.
    shim = Path(tempfile.mkdtemp(prefix="jail-user-shim-"))
    shutil.copytree(
        jail_module.project_root() / "agents",
        shim / "agents",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    spec = importlib.util.find_spec("pyseccomp")
    if spec is not None and spec.origin:
        shutil.copyfile(spec.origin, shim / "pyseccomp.py")
    for path in [shim, *shim.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    argv = [python, "-I", "-c", USER_DRIVER, str(shim), str(shim)]
    try:
        done = subprocess.run(
            [*argv, USER_PAYLOAD],
            capture_output=True,
            text=True,
            timeout=180,
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
            preexec_fn=lambda: (os.setgroups([]), os.setgid(65534), os.setuid(65534)),
        )
    finally:
        shutil.rmtree(shim, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.splitlines()[-1])
    if report["mode"] is None:
        pytest.skip("bubblewrap cannot start as a normal user here")
    assert report["mode"] == "user", report
    child = json.loads(report["child"].splitlines()[-1])
    assert child["CapEff"] == "0000000000000000" and child["uid"] == 65534
    cap = launch_module.process_cap(1, Limits(max_processes=16))
    assert 0 < child["made"] <= cap, report
    assert "RLIMIT_NPROC" in report["isolation"]
