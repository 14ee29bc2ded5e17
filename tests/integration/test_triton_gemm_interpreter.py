"""The triton-gemm pass's generated kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1)
and compared with the reference in float64 by the verifier's own rule, for every epilogue, GEMM
form and tile config, and for drawn shapes and epilogue chains.

The interpreter runs in a worker process, so its setting never reaches other tests (Triton
reads it when a kernel is decorated). It computes tl.dot as a numpy fp32 matmul whatever
input_precision says: these tests check the generated indexing, masks, broadcasting and
epilogue formulas; the 3xTF32 split is checked by emulation and on the GPU
(tests/integration/test_triton_gemm.py).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.offline.passes.triton_gemm_kernel import ROW_TILES, TILES
from agents.verify.compare import compare_output, flatten
from agents.verify.static_check import check_candidate
from tests.conftest import ROOT
from tests.integration.test_triton_gemm import bench, gemm_problem, linear_problem, load, rewrite

# -- running the kernels in the interpreter ----------------------------------------------------


class Interpreter:
    """A worker process with TRITON_INTERPRET=1: it runs a candidate once per autotune
    config (the interpreter cannot benchmark, so each config is forced in turn) and answers
    with the verifier's float64 comparison of each run."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="triton_gemm_"))
        env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
        self.log = open(self.dir / "worker.log", "w")  # noqa: SIM115 (closed in close())
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.test_triton_gemm_interpreter", "--worker"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.count = 0

    def run(self, problem: str, candidate: str, tiles: int | None = None) -> list[dict[str, Any]]:
        """One run per tile config of each kernel's table, or per `tiles` of them spread
        over the table (its first and last among them)."""
        self.count += 1
        paths = [self.dir / f"{kind}_{self.count}.py" for kind in ("problem", "candidate")]
        for path, text in zip(paths, (problem, candidate), strict=True):
            path.write_text(text)
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps([*(str(p) for p in paths), tiles]) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(
                "the interpreter worker died: " + (self.dir / "worker.log").read_text()[-2000:]
            )
        answer = json.loads(line)
        if "error" in answer:
            raise AssertionError(answer["error"])
        return answer["runs"]

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=60)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def interpreter():
    worker = Interpreter()
    yield worker
    worker.close()


def interpreted(
    interpreter: Interpreter, text: str, tiles: int | None = None
) -> list[dict[str, Any]]:
    """The generated kernel's runs (one per tile config, or per `tiles` of them spread over
    the table) against float64, all in the band."""
    result = rewrite(text)
    assert result.source is not None, result.summary
    assert check_candidate(result.source) == []  # what the verifier checks before running it
    runs = interpreter.run(text, result.source, tiles)
    for run in runs:
        assert run["float64_ok"], run
    return runs


EPILOGUES = {
    "bare": "y",
    "relu": "torch.relu(y)",
    "gelu": "F.gelu(y)",
    "gelu_tanh": "F.gelu(y, approximate='tanh')",
    "sigmoid": "torch.sigmoid(y * 8.0)",
    "tanh": "torch.tanh(y * 3.0)",
    "silu": "F.silu(y)",
    "swish": "y * torch.sigmoid(y)",
    "hardtanh": "F.hardtanh(y, -0.5, 0.5)",
    "leaky_relu": "F.leaky_relu(y, 0.2)",
    "mish": "F.mish(y * 4.0)",
    "softplus": "F.softplus(y, beta=2.0, threshold=1.0)",
    "hardswish": "F.hardswish(y * 3.0)",
    "clamp": "torch.clamp(y, min=-0.3, max=0.4)",
    "scale_residual": "torch.relu(y * self.scale + r)",
    "broadcast": "(y - self.shift) / 2.0",
    "softmax": "torch.softmax(y * self.scale, dim=-1)",
    "log_softmax": "F.log_softmax(y, dim=1)",
    "logsumexp": "torch.logsumexp(y, dim=1, keepdim=True) * 2.0",
    "mean": "torch.mean(torch.relu(y), dim=-1)",
    "row_minus_tile": "y.amax(dim=-1, keepdim=True) - y",
    "modules": "self.act2(self.act(y))",
    "inplace": "F.relu(y, inplace=True) + r",
}
MODULES = "        self.act = nn.GELU(approximate='tanh')\n        self.act2 = nn.LeakyReLU(0.1)\n"


ROW_EPILOGUES = {"softmax", "log_softmax", "logsumexp", "mean", "row_minus_tile"}


@pytest.mark.parametrize("name", list(EPILOGUES))
def test_each_epilogue_matches_float64_in_the_interpreter(interpreter, name):
    text = linear_problem(EPILOGUES[name], init=MODULES if name == "modules" else "")
    runs = interpreted(interpreter, text)
    assert len(runs) == len(ROW_TILES if name in ROW_EPILOGUES else TILES)  # every tile ran


FORMS = {
    "bmm_softmax": (
        "        return torch.softmax(torch.bmm(args[0], args[1]), dim=-1)",
        "[torch.randn(3, 17, 33), torch.randn(3, 33, 29)]",
        "",
    ),
    "matmul_4d": (
        "        return torch.matmul(args[0], args[1]) * 0.5",
        "[torch.randn(2, 3, 11, 13), torch.randn(2, 3, 13, 7)]",
        "",
    ),
    "matmul_3d_weight_t": (
        "        return torch.matmul(args[0], self.weight.T) + self.bias",
        "[torch.randn(2, 19, 70)]",
        "        self.weight = nn.Parameter(torch.randn(45, 70))\n"
        "        self.bias = nn.Parameter(torch.randn(45))",
    ),
    "addmm_relu": (
        "        return torch.relu(torch.addmm(self.bias, args[0], self.weight))",
        "[torch.randn(37, 70)]",
        "        self.weight = nn.Parameter(torch.randn(70, 45))\n"
        "        self.bias = nn.Parameter(torch.randn(45))",
    ),
    "f_linear_column_bias": (
        "        return F.linear(args[0], self.weight) + self.column",
        "[torch.randn(37, 70)]",
        "        self.weight = nn.Parameter(torch.randn(45, 70))\n"
        "        self.column = nn.Parameter(torch.randn(37, 1))",
    ),
}


@pytest.mark.parametrize("name", list(FORMS))
def test_each_gemm_form_matches_float64_in_the_interpreter(interpreter, name):
    interpreted(interpreter, gemm_problem(*FORMS[name]))


@pytest.mark.parametrize(
    "name",
    ["01_matmul", "09_gemm_relu", "10_gemm_gelu", "13_gemm", "15_gemm", "19_mlp", "20_attention"],
)
def test_bench_problems_match_float64_in_the_interpreter(interpreter, name):
    heads = {"BATCH": 3, "SEQ": 37, "DIM": 45, "HEADS": 3}  # the head dim must divide DIM
    interpreted(interpreter, bench(name, cap=48, sizes=heads if "attention" in name else None))


OPS = [
    "torch.relu({})",
    "F.gelu({})",
    "torch.sigmoid({})",
    "torch.tanh({})",
    "{} * self.scale",
    "{} + r",
    "F.leaky_relu({}, 0.2)",
    "torch.clamp({}, -0.5, 0.5)",
    "{0} * torch.sigmoid({0})",
    "F.mish({})",
    "1.5 - {}",
    "F.hardtanh({})",
    "{} / (1.0 + self.scale)",
]
ROWS = ["{}", "torch.softmax({}, dim=-1)", "torch.logsumexp({}, dim=-1)", "{}.sum(-1, True)"]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    m=st.integers(1, 70),
    k=st.integers(1, 90),
    n=st.integers(1, 90),
    chain=st.lists(st.sampled_from(OPS), min_size=1, max_size=3),
    row=st.sampled_from(ROWS),
    batch=st.sampled_from([0, 0, 2, 3]),
)
def test_drawn_shapes_and_chains_match_float64_in_the_interpreter(
    interpreter, m, k, n, chain, row, batch
):
    value = "y"
    for op in [*chain, row]:
        value = op.format(value if value == "y" else f"({value})")
    interpreted(interpreter, linear_problem(value, m, k, n, batch=batch), tiles=4)


# -- the worker ----------------------------------------------------------------------------


def _spread(count: int, tiles: int | None) -> list[int]:
    """`tiles` indices spread over range(count), first and last included (all: None)."""
    if tiles is None or tiles >= count:
        return list(range(count))
    if tiles <= 1:
        return [0]
    return sorted({round(i * (count - 1) / (tiles - 1)) for i in range(tiles)})


def _interpret(
    problem_path: str, candidate_path: str, tiles: int | None = None
) -> list[dict[str, Any]]:
    problem_text = Path(problem_path).read_text()
    problem = load(problem_text, problem_path, f"problem_{Path(problem_path).stem}")
    spec = importlib.util.spec_from_file_location(Path(candidate_path).stem, candidate_path)
    assert spec and spec.loader
    candidate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(candidate)
    torch.manual_seed(0)
    init = problem.get_init_inputs()
    model = problem.Model(*init)
    new = candidate.ModelNew(*init)
    new.load_state_dict(model.state_dict())
    torch.manual_seed(1)
    inputs = problem.get_inputs()
    with torch.no_grad():
        reference = flatten(model(*inputs))
        wide = [x.double() if x.is_floating_point() else x for x in inputs]
        gold = flatten(copy.deepcopy(model).double()(*wide))
        kernels = [v for k, v in sorted(vars(candidate).items()) if k.startswith("_tgemm_kernel_")]
        tables = [list(kernel.configs) for kernel in kernels]
        runs = []
        for index in _spread(max(len(table) for table in tables), tiles):
            for kernel, table in zip(kernels, tables, strict=True):
                kernel.configs = [table[min(index, len(table) - 1)]]
            outputs = flatten(new(*inputs))
            for out, ref, ref64 in zip(outputs, reference, gold, strict=True):
                assert out.shape == ref.shape and out.dtype == ref.dtype, (out.shape, ref.shape)
                found = compare_output(out, ref, ref64)
                runs.append(
                    {
                        "tile": str(kernels[0].configs[0]),
                        "float64_ok": found.float64_ok,
                        "strict_ok": found.strict_ok,
                        "ratio": found.error_ratio,
                        "error": found.candidate_error,
                        "reference_error": found.reference_error,
                        "max_abs_diff": found.max_abs_diff,
                    }
                )
    return runs


def _worker() -> None:
    """Answer one JSON line per request line; stdout carries nothing else."""
    answers = os.fdopen(os.dup(1), "w")
    sys.stdout = sys.stderr
    for line in sys.stdin:
        problem_path, candidate_path, tiles = json.loads(line)
        started = time.perf_counter()
        try:
            answer: dict[str, Any] = {"runs": _interpret(problem_path, candidate_path, tiles)}
        except Exception as error:
            answer = {"error": f"{type(error).__name__}: {error}"}
        answer["seconds"] = round(time.perf_counter() - started, 2)
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    _worker()
