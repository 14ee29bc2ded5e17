"""The e-graph's modelled cost is that of the program `emit` writes: a GEMM proved unnecessary
(a constant shaped on the meta device, the op kept where it was now dead) is modelled as gone,
and the model is the same on every machine and under any load (no measured ceilings)."""

from __future__ import annotations

import re

import pytest

from agents.offline.egraph.cost import Roofline
from agents.offline.egraph.saturate import EqualitySaturation
from agents.offline.fx.tracing import apply_general_first
from tests.conftest import ROOT
from tests.programs import loaded_program

ALGEBRA = ROOT / "tests" / "algebra_problems"
MODELLED = re.compile(r"modelled cost ([0-9.]+) -> ([0-9.]+) us")


def modelled(name: str) -> tuple[float, float]:
    program, _ = loaded_program(ALGEBRA / f"{name}.py")
    rewrite = apply_general_first(EqualitySaturation(), program)
    assert rewrite.source is not None, rewrite.summary
    found = MODELLED.search(rewrite.summary)
    assert found is not None, rewrite.summary
    return float(found[1]), float(found[2])


@pytest.mark.parametrize("name", ["1_Gemm_Max_SubtractMean_GELU", "4_Gemm_RowMax_Centre_GELU"])
def test_a_gemm_proved_unnecessary_is_modelled_as_gone(name):
    """Before: the GEMM was still charged through the zeros' shape source and the dead max
    op that read it, so a 100x collapse was modelled as 1.5x."""
    original, collapsed = modelled(name)
    assert collapsed * 50 < original, (original, collapsed)


def test_the_model_is_the_same_on_every_machine():
    assert Roofline.for_device("cpu") == Roofline.for_device("cpu")
    assert Roofline.for_device("cuda") != Roofline.for_device("cpu")
    assert modelled("4_Gemm_RowMax_Centre_GELU") == modelled("4_Gemm_RowMax_Centre_GELU")
