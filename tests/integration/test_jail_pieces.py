"""The jail's pieces without a payload: the bubblewrap command line it plans (what is bound,
for a CPU and a GPU), the child's environment (an allow-list), the cache sweep, the seccomp
kill filter, and the start-up probe that must fail where the sandbox uid cannot read torch."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agents.sandbox import jail as jail_module
from agents.sandbox import seccomp
from agents.sandbox.caches import sweep_caches
from agents.sandbox.env import sandbox_environment
from agents.sandbox.jail import Jail, plan_command
from agents.sandbox.launch import Limits
from tests.integration.test_jail import SECRETS


def _plan(device: str, monkeypatch) -> list[str]:
    monkeypatch.setattr(jail_module, "gpu_device_nodes", lambda: ["/dev/nvidia0", "/dev/nvidiactl"])
    jail = Jail("/usr/bin/bwrap", "root-userns", frozenset({"--size", "--perms", "--cap-drop"}))
    work, cache = Path("/tmp/work"), Path("/tmp/cache")
    plan = plan_command(
        jail,
        ["python", "-c", "pass"],
        workdir=work,
        cache_dir=cache,
        device=device,
        tmpfs_bytes=1 << 30,
        nproc=None,
        seccomp_fd=None,
    )
    plan.close_fds()
    return plan.argv


def test_cuda_binds_the_gpu_nodes_and_sys_and_cpu_does_not(monkeypatch):
    cuda, cpu = _plan("cuda", monkeypatch), _plan("cpu", monkeypatch)
    for node in ("/dev/nvidia0", "/dev/nvidiactl"):
        assert cuda[cuda.index(node) - 1 : cuda.index(node) + 2] == ["--dev-bind", node, node]
        assert node not in cpu
    assert "/sys" in cuda and "/sys" not in cpu
    assert cuda.index("/dev/nvidia0") < cuda.index("--remount-ro")  # bound before /dev is ro


def test_command_binds_only_what_the_child_needs(monkeypatch):
    argv = _plan("cpu", monkeypatch)
    pairs = list(itertools.pairwise(argv))
    sources = [source for option, source in pairs if option in ("--ro-bind", "--bind")]
    root = str(jail_module.project_root())
    assert not {"/", root, "/etc", "/etc/shadow", "/etc/passwd"} & set(sources)
    assert not [s for s in sources if s.startswith(("/home", "/srv", "/work/shared"))]
    assert f"{root}/agents" in sources and ("--cap-drop", "ALL") in pairs
    assert ("--remount-ro", "/dev") in pairs and ("--remount-ro", "/") in pairs
    at = pairs.index(("--tmpfs", "/tmp"))
    assert argv[at - 2 : at] == ["--size", str(1 << 30)] and argv[-4:] == [
        "--",
        "python",
        "-c",
        "pass",
    ]


def test_environment_is_an_allow_list(tmp_path):
    source = {**SECRETS, "PATH": "/usr/bin", "LC_ALL": "C", "CUDA_HOME": "/usr/local/cuda"}
    source |= {"TRITON_CACHE_DIR": "/elsewhere", "NVIDIA_API_KEY": "nv", "LD_PRELOAD": "/x.so"}
    env = sandbox_environment(home_root=Path("/tmp"), cache_dir=tmp_path, threads=3, source=source)
    assert env["PATH"] == "/usr/bin" and env["LC_ALL"] == "C" and env["CUDA_HOME"]
    assert not {*SECRETS, "NVIDIA_API_KEY", "LD_PRELOAD"} & set(env)
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton")
    assert env["HOME"] == "/tmp/home" and env["TMPDIR"] == "/tmp"
    assert env["OMP_NUM_THREADS"] == "3" and env["TORCHINDUCTOR_COMPILE_THREADS"] == "1"


def test_sweep_caches_deletes_the_least_recently_used_first(tmp_path):
    now = time.time()
    for index, name in enumerate(["old", "middle", "new"]):
        (tmp_path / name).mkdir()
        (tmp_path / name / "blob").write_bytes(os.urandom(256 * 1024))
        os.utime(tmp_path / name, (now - 1000 + index * 100,) * 2)
    assert [path.name for path in sweep_caches(tmp_path, keep_bytes=600 * 1024)] == ["old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["middle", "new"]


def test_kill_filter_arches_and_limits_where_they_were():
    assert all(seccomp.kill_filter(1234, arch) for arch in ("x86_64", "aarch64"))
    assert seccomp.kill_filter(1234, "riscv64") is None  # unknown: said in the verdict
    from agents.sandbox.process import Limits as OldLimits

    assert OldLimits is Limits and replace(Limits(), max_processes=3).max_processes == 3


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to run the probe without the capabilities that read all",
)
@pytest.mark.parametrize("mode, starts", [(0o644, True), (0o600, False)])
def test_the_probe_fails_where_the_sandbox_uid_cannot_read_torch(mode, starts):
    """The probe reads torch's files instead of importing it: a uid that cannot read the
    shared libraries must still fail it, as an import would. Played by root without the
    two capabilities that read any file, against a library another uid owns."""
    from agents.sandbox.jail import PROBE_CODE

    SETPRIV = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
    root = Path(tempfile.mkdtemp(prefix="probe-fake-"))
    try:
        os.chmod(root, 0o755)
        package = root / "torch"
        (package / "lib").mkdir(parents=True)
        (package / "__init__.py").write_text("raise SystemExit('not to be imported')\n")
        library = package / "lib" / "libtorch_cpu.so"
        library.write_bytes(b"\x7fELF")
        os.chown(library, 12345, 12345)
        library.chmod(mode)
        code = f"import sys; sys.path.insert(0, {str(root)!r})\n" + PROBE_CODE
        done = subprocess.run(
            [*SETPRIV, sys.executable, "-I", "-c", code],
            capture_output=True,
            timeout=60,
            check=False,
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert (done.returncode == 0) is starts, done.stderr
    if not starts:
        assert b"PermissionError" in done.stderr
