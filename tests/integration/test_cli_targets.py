"""`kernel-agent optimize FILE.py::NAME` as a subprocess: a plain function on the CPU, a
Triton launcher on a GPU. What it writes is the user's file with `NAME_optimized` added
alongside NAME (the editor's Accept), never over the file itself."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT, TESTS
from tests.integration.test_search import optimize

TARGETS = TESTS / "data" / "targets"
QUICK = ("--json", "--threads", "1", "--no-profile", "--no-memory", "--iterations", "1")


def cli_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agents", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def written_back(path, report, original: str, name: str) -> dict:
    """The file written for an improved target: the user's text, unchanged (the imports the
    rewrite needs join theirs), with the verified rewrite and `name`_optimized after NAME;
    its module namespace, run."""
    assert report["output"] == str(path), report["output"]
    text = path.read_text()
    remaining = iter(text.splitlines())  # every line of the user's, in order (imports join)
    assert all(line in remaining for line in original.splitlines())
    assert f"def {name}_optimized(" in text
    assert "class ModelNew" not in text and "kernel-agent: the optimisation target" not in text
    namespace: dict = {}
    exec(compile(text, str(path), "exec"), namespace)
    return namespace


def test_an_unknown_name_is_one_line_naming_the_files_targets(tmp_path):
    source = shutil.copy(TARGETS / "softmax_function.py", tmp_path / "softmax.py")
    done = optimize(f"{source}::softmax", *QUICK, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "no target `softmax`" in line and "manual_softmax (function)" in line
    assert not (tmp_path / "softmax_optimized.py").exists()


def test_a_function_without_inputs_is_told_what_to_add(tmp_path):
    source = tmp_path / "softmax.py"
    source.write_text((TARGETS / "softmax_function.py").read_text().replace("get_inputs", "f"))
    done = optimize(f"{source}::manual_softmax", *QUICK, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "def get_inputs()" in line


@pytest.mark.slow
def test_a_plain_function_is_optimised_and_written_back_beside_itself(tmp_path):
    source = shutil.copy(TARGETS / "gemm_sum.py", tmp_path / "gemm_sum.py")
    original = source.read_text()
    done = optimize(f"{source}::gemm_sum", *QUICK, "--max-evals", "6", "--timing-budget", "1.0")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    fates = [(c["plan"], c["fate"], c["reason"]) for c in report["candidates"]]
    assert report["improved"] and report["verdict"] == "correct", fates
    assert report["device"] == "cpu" and source.read_text() == original
    namespace = written_back(tmp_path / "gemm_sum_optimized.py", report, original, "gemm_sum")
    x, weight = namespace["get_inputs"]()
    torch.testing.assert_close(
        namespace["gemm_sum_optimized"](x, weight),
        namespace["gemm_sum"](x, weight),
        rtol=1e-4,
        atol=1e-2,  # a sum of 1024 products, reassociated
    )


def test_profile_names_a_target_as_optimize_does(tmp_path):
    source = shutil.copy(TARGETS / "gemm_sum.py", tmp_path / "gemm_sum.py")
    done = cli_command(
        "profile", f"{source}::gemm_sum", "--json", "--threads", "1", "--repeat", "2"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = {line["line"]: line["source"] for line in json.loads(done.stdout)["lines"]}
    assert lines[12] == "y = torch.matmul(x, weight.T)"  # the user's own line numbers
    assert set(lines) <= {12, 13, 14, 15}


def test_eval_judges_a_candidate_against_a_named_target():
    reference = f"{TARGETS / 'gemm_sum.py'}::gemm_sum"
    candidate = str(TARGETS / "gemm_sum_new.py")
    done = cli_command("eval", reference, candidate, "--json", "--threads", "1", "--no-timing")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["verdict"] == "correct"
    wrong = cli_command("eval", f"{TARGETS / 'gemm_sum.py'}::nope", candidate)
    assert wrong.returncode == 2 and "no target `nope`" in wrong.stderr


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_triton_launcher_is_optimised_on_the_gpu(tmp_path):
    source = shutil.copy(TARGETS / "triton_add.py", tmp_path / "triton_add.py")
    original = source.read_text()
    # Every offline plan (not one iteration's): the first ones need fx, which cannot trace
    # a Triton launch, and torch.compile's comes after them.
    done = optimize(
        f"{source}::add", "--json", "--no-memory", "--device", "cuda", "--max-evals", "4"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    fates = [(c["plan"], c["verdict"], c["reason"]) for c in report["candidates"]]
    assert report["device"] == "cuda" and report["verdict"] in ("correct", "no_improvement")
    # The synthesised problem ran in the verifier on the GPU: a candidate was checked against it.
    assert any(verdict == "correct" for _, verdict, _ in fates), fates
    assert source.read_text() == original
    if not report["improved"]:
        assert report["output"] is None
        return
    namespace = written_back(tmp_path / "triton_add_optimized.py", report, original, "add")
    x, y = namespace["get_inputs"]()
    torch.testing.assert_close(namespace["add_optimized"](x, y), namespace["add"](x, y))
