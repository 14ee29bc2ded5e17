"""bench/gpu_checks.sh part h (issue 31): its bookkeeping reads the bench and timing reports,
holds the large GEMMs to their target, resumes what is left, and rewrites only its own section
of bench/RESULTS.md; bench/gemm_sizes.py reads M·N·K off a problem on the meta device."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def part_h(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import gpu_checks_part_h
    import gpu_checks_parts

    monkeypatch.setattr(gpu_checks_parts, "WORK", tmp_path)
    monkeypatch.setattr(gpu_checks_parts, "OUT", tmp_path)
    monkeypatch.setenv("GC_H_PROBLEMS", "big_linear small_mm broken")
    monkeypatch.setenv("GC_F_PROBLEMS", "08_gelu")
    monkeypatch.chdir(ROOT)
    return gpu_checks_part_h


def _row(problem: str, speedup: float, verdict: str = "correct") -> dict:
    return {
        "problem": problem,
        "verdict": verdict,
        "eager_ms": 10.0,
        "compile_ms": 9.0,
        "agent_ms": 10.0 / speedup,
        "speedup": speedup,
        "vs_compile": 9.0 / (10.0 / speedup),
        "methods": ["triton-gemm"],
        "candidates": [{"fate": "chosen", "error_ratio": 0.2}],
    }


def test_large_gemms_are_held_to_the_target_and_small_ones_are_not(part_h, tmp_path):
    sizes = {"big_linear": {"mnk": 2**36, "log2": 36}, "small_mm": {"mnk": 2**20, "log2": 20}}
    (tmp_path / "h-sizes.json").write_text(json.dumps(sizes))
    rows = [_row("big_linear", 1.5), _row("small_mm", 0.9)]
    (tmp_path / "h-optimize.json").write_text(json.dumps({"rows": rows}))
    timing = {
        "rows": [
            {
                "problem": "08_gelu",
                "verdict": "correct",
                "outside_ms": 0.5,
                "events_ms": 0.49,
                "ratio": 0.5 / 0.49,
                "aa": 1.0,
            },
            {
                "problem": "00_no_kernel",
                "verdict": "correct",
                "outside_ms": 0.05,
                "events_ms": 0.004,
                "ratio": 12.5,
                "aa": 1.0,
            },
        ]
    }
    (tmp_path / "h-timing.json").write_text(json.dumps(timing))
    body, lines, fail, target, _, pending = part_h.h_finish({})
    assert any("big_linear" in line and "0.200" in line for line in lines)
    # the median is over the large shape only (1.5x), so the target is missed; the no-kernel
    # forward (50 us) misses its own; its ratio is no part of the outside/events median
    assert any("1.50x" in t for t in target)
    assert any("no-kernel forward" in t for t in target)
    assert not any("median outside/events" in t for t in target)
    assert fail == []
    assert pending == ["broken"]  # the one problem with no row is what a rerun runs
    assert body["sizes"] == sizes


def test_results_section_is_replaced_not_appended(part_h, tmp_path, monkeypatch):
    monkeypatch.setenv("GC_DEVICE", "cuda")
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nkept above\n")
    data = {"status": "passed", "lines": ["table one"], "commands": ["cmd"], "machine": "H100"}
    part_h.write_results(data, results)
    part_h.write_results({**data, "lines": ["table two"]}, results)
    text = results.read_text()
    assert text.count(part_h.MARK_BEGIN) == 1
    assert "table two" in text and "table one" not in text and "kept above" in text


def test_gemm_sizes_reads_mnk_on_the_meta_device(tmp_path):
    problem = tmp_path / "bmm_case.py"
    problem.write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n        super(Model, self).__init__()\n"
        "    def forward(self, a, b):\n        return torch.bmm(a, b).relu()\n\n"
        "def get_inputs():\n    return [torch.randn(128, 512, 256), torch.randn(128, 256, 64)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    out = tmp_path / "sizes.json"
    subprocess.run(
        [sys.executable, "bench/gemm_sizes.py", str(out), str(problem)],
        cwd=ROOT,
        check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert json.loads(out.read_text())["bmm_case"]["mnk"] == 128 * 512 * 256 * 64
