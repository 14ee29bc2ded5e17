"""Every known reward hack, written as a real candidate, must be refused, or measured at its
true speed.

Each file in tests/adversarial/ names its problem and its expectations in its header (see
tests/adversarial/README.md): the static rule that must flag it, the verdict the runtime
checks alone must reach with the static checker switched off (defence in depth: neither layer
relies on the other), and for some a stronger expectation (true speed, or a jail that holds).
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agents.evaluate import evaluate
from agents.sandbox.devicelock import DeviceGate, DeviceLock
from agents.task import SourceFile
from agents.verify.verdict import Verdict
from tests.conftest import ADVERSARIAL, FAST, PROBLEMS, ROOT, requires_jail, run_eval

CHEATS = sorted(ADVERSARIAL.glob("*.py"))
FIELDS = ("problem", "static", "runtime", "expect", "limits", "options")


def header(path: Path) -> dict[str, str]:
    fields = dict(re.findall(rf"^# ({'|'.join(FIELDS)}): (.+)$", path.read_text(), re.M))
    assert {"problem", "static", "runtime"} <= set(fields), f"{path.name}: incomplete header"
    return {key: value.strip() for key, value in fields.items()}


def limits(spec: dict[str, str]):
    """The header's short limits (`build=10 run=8 cache=64M`) over the fast defaults."""
    values = dict(item.split("=") for item in spec.get("limits", "").split())
    changes = {}
    if "build" in values:
        changes["build_timeout_s"] = float(values["build"])
    if "run" in values:
        changes["run_timeout_s"] = float(values["run"])
    if "cache" in values:
        changes["cache_bytes"] = int(values["cache"].rstrip("M")) * 1024**2
    return replace(FAST.limits, **changes)


def timings(spec: dict[str, str]) -> list[bool]:
    """With timing, and also without it when the header says `options: no-timing` (a cheat
    that only the timed runs' fresh inputs would catch must be refused by the trials alone)."""
    return [True, False] if "no-timing" in spec.get("options", "").split() else [True]


def test_the_suite_covers_every_known_hack():
    names = {path.stem for path in CHEATS}
    for hack in (
        "cached_output",
        "empty_output",
        "zero_inputs",
        "background_thread",
        "patch_allclose",
        "patch_timer",
        "try_fallback",
        "call_reference",
        "bf16_downgrade",
        "stale_folded_weights",
        "tensor_subclass",
        "os_exit_at_import",
        # issue 18's families
        "forge_reply_out_of_turn",
        "walk_frames_to_reply",
        "patch_own_harness",
        "memo_by_content",
        "timing_by_identity",
        "global_hook_bends",
        "aten_override_identity",
        "aten_override_faithful",
        "grad_and_threads",
        "cpu_hog_thread",
        "double_fork_daemon",
        "precompute_in_prepare",
        "inplace_after_verification",
        "finish_late",
        "flood_reply",
        "ansi_in_error",
        "cache_bomb",
        "cache_many_files",
        "kill_the_parent",
        "hang_in_init",
        "hang_in_timing",
        "jail_escape",
        "background_precompute_thread",
        # issue 32: the accused computes no evidence; no seed can be predicted
        "forged_argument_checksum",
        "trial_seed_prediction",
        "forged_state_dict_claim",
        "fork_after_freeze",  # stopped means stopped: a cgroup frozen as one
        "projected_checksum_matmul",  # a timed reply commits to every element, nonlinearly
        "projected_checksum_padded",
    ):
        assert hack in names


REFUSED = [
    path
    for path in CHEATS
    if not (header(path)["static"] == "none" and header(path).get("expect") == "true-speed")
]


@pytest.mark.parametrize("cheat", REFUSED, ids=lambda p: p.stem)
def test_cheat_is_refused(cheat: Path):
    """With every check on: refused (a trick no static rule names and that buys nothing is
    instead measured at its true speed, below)."""
    spec = header(cheat)
    for measure in timings(spec):
        result = run_eval(spec["problem"], cheat, limits=limits(spec), measure=measure)
        assert result.verdict is not Verdict.CORRECT, (measure, result.reasons)
        assert result.reasons
        if spec["static"] != "none":
            assert result.verdict is Verdict.REJECTED
            assert spec["static"] in {f["rule"] for f in result.static_findings}, result.reasons


RUNTIME_CHEATS = [path for path in CHEATS if header(path)["runtime"] != "correct"]


@pytest.mark.parametrize("cheat", RUNTIME_CHEATS, ids=lambda p: p.stem)
def test_runtime_checks_alone_refuse_cheat(cheat: Path):
    spec = header(cheat)
    for measure in timings(spec):
        result = run_eval(
            spec["problem"], cheat, static_check=False, limits=limits(spec), measure=measure
        )
        assert result.verdict is not Verdict.CORRECT, (measure, result.reasons)
        if spec["runtime"] != "not-correct":
            assert result.verdict.value == spec["runtime"], (measure, result.reasons)
        text = " ".join(result.reasons)
        assert "\x1b" not in text and "\x07" not in text  # whatever it printed, no escapes


TRUE_SPEED = [path for path in CHEATS if header(path).get("expect") == "true-speed"]


@pytest.mark.parametrize("cheat", TRUE_SPEED, ids=lambda p: p.stem)
def test_a_trick_that_buys_nothing_is_measured_at_its_true_speed(cheat: Path):
    """These computed nothing in the old single-process timing and were measured 4-26x
    faster; each computes what the reference computes, so its true speed is about 1x. The
    bound is a security property (no phantom speedup), not a speed claim."""
    spec = header(cheat)
    result = run_eval(spec["problem"], cheat, static_check=False, timing_budget_s=0.5)
    assert result.verdict is Verdict.CORRECT, result.reasons
    assert result.speedup is not None and result.speedup < 2.0, result.speedup


@requires_jail
def test_the_jail_holds_against_a_root_escape_through_libc():
    spec = header(ADVERSARIAL / "jail_escape.py")
    result = run_eval(spec["problem"], ADVERSARIAL / "jail_escape.py", static_check=False)
    assert "ESCAPED" not in " ".join(result.reasons), result.reasons
    assert result.verdict is Verdict.CORRECT, result.reasons
    assert not Path("/etc/kernel-agent-escape").exists()


def test_a_hang_in_timing_frees_the_device_at_its_deadline(tmp_path):
    """The timed call hangs: the verdict comes at the run deadline, and the timing lock is
    free the moment it does (it was held for 300 s before). The lock is one of the test's
    own (a `DeviceGate` over a private folder, as `evaluate` takes the machine-wide one):
    under pytest-xdist the other worker's evaluations hold the machine-wide lock whenever
    they time, which says nothing of this one's."""
    spec = header(ADVERSARIAL / "hang_in_timing.py")
    started = time.monotonic()
    result = evaluate(
        SourceFile.from_path(PROBLEMS / spec["problem"]),
        SourceFile.from_path(ADVERSARIAL / "hang_in_timing.py"),
        replace(
            FAST,
            static_check=False,
            limits=replace(FAST.limits, run_timeout_s=4),
            timing_budget_s=30,
        ),
        gate=DeviceGate("cpu", tmp_path),
    )
    assert result.verdict is Verdict.TIMEOUT, result.reasons
    assert time.monotonic() - started < 60
    give_up = threading.Event()
    threading.Timer(1.0, give_up.set).start()
    lock = DeviceLock(tmp_path, "cpu")
    assert lock.acquire(give_up), "the device's timing lock is still held"
    lock.release()


KILLER = """
import sys
from tests.conftest import run_eval
result = run_eval("linear_relu.py", sys.argv[1], static_check=False, jail=False)
print(result.verdict.value)
"""


def test_without_the_jail_a_candidate_cannot_kill_its_parent():
    """jail=False (--no-jail, asked for explicitly): no PID namespace stands between the
    candidate and the process that judges it, only the seccomp filter. That process must
    outlive a candidate that SIGKILLs it and its process group."""
    done = subprocess.run(
        [sys.executable, "-c", KILLER, str(ADVERSARIAL / "kill_the_parent.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    assert done.stdout.strip().splitlines()[-1] == "compile_error", done.stdout
