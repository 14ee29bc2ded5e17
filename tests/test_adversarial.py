"""Every known reward hack, written as a real candidate, must be refused.

Each file in tests/adversarial/ names its problem and two expectations in its header: the
static rule that must flag it, and the verdict the runtime checks alone must reach when the
static checker is switched off (defence in depth: neither layer relies on the other).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agents.verify.verdict import Verdict
from tests.conftest import ADVERSARIAL, run_eval

CHEATS = sorted(ADVERSARIAL.glob("*.py"))


def header(path: Path) -> dict[str, str]:
    fields = dict(re.findall(r"^# (problem|static|runtime): (\S+)", path.read_text(), re.M))
    assert {"problem", "static", "runtime"} <= set(fields), f"{path.name}: incomplete header"
    return fields


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
    ):
        assert hack in names


@pytest.mark.parametrize("cheat", CHEATS, ids=lambda p: p.stem)
def test_cheat_is_refused(cheat: Path):
    spec = header(cheat)
    result = run_eval(spec["problem"], cheat)
    assert result.verdict is not Verdict.CORRECT, result.reasons
    assert result.reasons
    if spec["static"] != "none":
        assert result.verdict is Verdict.REJECTED
        assert spec["static"] in {f["rule"] for f in result.static_findings}, result.reasons


RUNTIME_CHEATS = [path for path in CHEATS if header(path)["runtime"] != "correct"]


@pytest.mark.parametrize("cheat", RUNTIME_CHEATS, ids=lambda p: p.stem)
def test_runtime_checks_alone_refuse_cheat(cheat: Path):
    spec = header(cheat)
    overrides = {"static_check": False}
    if cheat.stem == "hang":
        overrides["limits"] = run_eval.__globals__["FAST"].limits.__class__(
            build_timeout_s=120, run_timeout_s=8, address_space_bytes=6 * 1024**3
        )
    result = run_eval(spec["problem"], cheat, **overrides)
    assert result.verdict is not Verdict.CORRECT, result.reasons
    if spec["runtime"] != "not-correct":
        assert result.verdict.value == spec["runtime"], result.reasons
