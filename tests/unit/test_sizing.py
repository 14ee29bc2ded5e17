"""The meta-device estimator and `--size fit`'s scaler, in-process on small models whose
bytes and FLOPs are known exactly (nothing is allocated: every tensor is on meta)."""

from __future__ import annotations

import textwrap

import pytest

from agents.sizing.api import SizePlan
from agents.sizing.check import refusal, refuse_if_too_big, shortfall
from agents.sizing.constants import input_only_constants
from agents.sizing.fit import batch_constants, fit, forward_seconds
from agents.sizing.footprint import FORWARD_SECONDS, GB, Footprint
from agents.sizing.machine import Capacity
from agents.sizing.trace import EstimateFailed, trace
from agents.task import (
    SourceFile,
    TaskLoadError,
    apply_size,
    check_size,
    fit_overrides,
    fitted_size,
    load_problem,
)
from tests.conftest import ROOT

F32 = 4


def problem(body: str, constants: str, inputs: str, init: str = "[]"):
    """A KernelBench-style problem built from its parts, loaded in this process."""
    method_lines = textwrap.indent(textwrap.dedent(body).strip(), "    ")
    text = "\n".join(
        [
            "import torch",
            "import torch.nn as nn",
            "",
            "class Model(nn.Module):",
            method_lines,
            "",
            textwrap.dedent(constants).strip(),
            "",
            "def get_inputs():",
            f"    return {inputs}",
            "",
            "def get_init_inputs():",
            f"    return {init}",
            "",
        ]
    )
    source = SourceFile(text)
    return load_problem(source), source


LINEAR = """
def __init__(self, n_in, n_out):
    super(Model, self).__init__()
    self.fc = nn.Linear(n_in, n_out)

def forward(self, x):
    return self.fc(x)
"""


def test_a_linear_layer_is_traced_to_its_exact_bytes_and_flops():
    loaded, source = problem(
        LINEAR,
        "batch_size = 512\nn_in = 1024\nn_out = 256",
        "[torch.randn(batch_size, n_in)]",
        "[n_in, n_out]",
    )
    found = trace(loaded, source)
    assert found.inputs_bytes == 512 * 1024 * F32
    assert found.weights_bytes == (1024 * 256 + 256) * F32
    assert found.output_bytes == found.activations_bytes == 512 * 256 * F32
    assert found.flops == 2 * 512 * 1024 * 256


def test_a_convolution_is_traced_to_its_exact_bytes_and_flops():
    loaded, source = problem(
        """
        def __init__(self):
            super(Model, self).__init__()
            self.conv = nn.Conv2d(3, 16, 3)

        def forward(self, x):
            return self.conv(x)
        """,
        "batch_size = 8",
        "[torch.randn(batch_size, 3, 34, 34)]",
    )
    found = trace(loaded, source)
    assert found.inputs_bytes == 8 * 3 * 34 * 34 * F32
    assert found.weights_bytes == (16 * 3 * 3 * 3 + 16) * F32
    assert found.output_bytes == 8 * 16 * 32 * 32 * F32
    assert found.flops == 2 * 8 * 16 * 32 * 32 * 3 * 3 * 3


def test_a_matmul_of_gpu_size_costs_nothing_to_trace():
    m, k, n = 65536, 32768, 16384  # 8.6 GB + 2.1 GB of inputs, 4.3 GB of output
    loaded, source = problem(
        "def forward(self, a, b):\n    return torch.matmul(a, b)",
        f"M = {m}\nK = {k}\nN = {n}",
        "[torch.randn(M, K), torch.randn(K, N)]",
    )
    found = trace(loaded, source)
    assert found.inputs_bytes == (m * k + k * n) * F32
    assert found.output_bytes == m * n * F32
    assert found.flops == 2 * m * k * n


def test_the_peak_counts_the_temporaries_alive_at_once_and_not_views():
    loaded, source = problem(
        """
        def forward(self, x):
            y = torch.relu(x)          # 1 tensor alive
            z = y * 2                  # 2 alive: the peak
            return z.view(-1)[:10]     # views add nothing; y is freed first
        """,
        "rows = 64\ncols = 1000",
        "[torch.randn(rows, cols)]",
    )
    found = trace(loaded, source)
    assert found.activations_bytes == 2 * 64 * 1000 * F32
    assert found.written_bytes == 2 * 64 * 1000 * F32
    assert found.output_bytes == 10 * F32


def test_a_data_dependent_forward_fails_the_estimate_instead_of_refusing():
    loaded, source = problem(
        "def forward(self, x):\n    return x * 2 if x.sum() > 0 else x",
        "n = 10",
        "[torch.randn(n)]",
    )
    with pytest.raises(EstimateFailed):
        trace(loaded, source)


def test_only_constants_that_get_inputs_alone_reads_may_be_scaled():
    text = textwrap.dedent(
        """
        batch_size = 16
        features = 64
        eps = 1
        scale = 2
        derived = scale * 3

        class Model:
            def forward(self, x):
                return x.view(x.shape[0], features)

        def get_inputs():
            return [batch_size, features, eps, derived]

        def get_init_inputs():
            return [eps]
        """
    )
    assert input_only_constants(text) == ["batch_size"]


LEVEL1 = "batch_size = 4096\ndim = 393216"  # KernelBench level 1's shipped ReLU sizes


def test_fit_scales_the_batch_and_never_the_feature_size():
    loaded, source = problem(
        "def forward(self, x):\n    return torch.relu(x)", LEVEL1, "[torch.randn(batch_size, dim)]"
    )
    room = Capacity(16 * int(GB), "available memory", worker_bytes=12 * int(GB))
    chosen = fit(loaded, source, "cpu", room)
    (shipped, used) = chosen.sizes["batch_size"]
    assert list(chosen.sizes) == ["batch_size"] and shipped == 4096 and 1 <= used < 4096
    assert vars(loaded.module)["dim"] == 393216 and vars(loaded.module)["batch_size"] == used
    assert chosen.footprint.need_bytes <= 8 * GB
    assert forward_seconds(chosen.footprint, "cpu") <= FORWARD_SECONDS
    # the largest power-of-two division that fits: twice the batch would not
    assert forward_seconds(trace_at(loaded, source, used * 2), "cpu") > FORWARD_SECONDS


def trace_at(loaded, source, batch: int) -> Footprint:
    vars(loaded.module)["batch_size"] = batch
    return trace(loaded, source)


def test_fit_keeps_a_contraction_dimension_and_a_size_init_reads():
    loaded, source = problem(
        LINEAR,
        "batch_size = 1048576\nn_in = 4096\nn_out = 4096",
        "[torch.randn(batch_size, n_in)]",
        "[n_in, n_out]",
    )
    assert batch_constants(loaded, source) == {"batch_size": 1048576}
    matmul, matmul_source = problem(
        "def forward(self, a, b):\n    return a @ b",
        "M = 65536\nK = 65536\nN = 64",
        "[torch.randn(M, K), torch.randn(K, N)]",
    )
    assert batch_constants(matmul, matmul_source) == {"M": 65536}


def test_fit_without_a_batch_like_constant_says_so_in_one_line():
    loaded, source = problem(
        "def forward(self, x):\n    return x * 2",
        "dim = 393216",
        "[torch.randn(dim, dim)]",  # dim sizes two positions: the math, never scaled
    )
    room = Capacity(16 * int(GB), "available memory")
    with pytest.raises(TaskLoadError, match="no batch-like constant to scale") as raised:
        fit(loaded, source, "cpu", room)
    assert "\n" not in str(raised.value)


def test_a_problem_that_fits_keeps_its_sizes():
    loaded, source = problem(
        "def forward(self, x):\n    return x * 2", "batch_size = 4\ndim = 8", "[torch.randn(4, 8)]"
    )
    chosen = fit(loaded, source, "cpu", Capacity(16 * int(GB), "available memory"))
    assert chosen.sizes == {} and not chosen.scaled


def test_the_refusal_says_what_is_needed_what_there_is_and_what_to_do():
    footprint = Footprint(
        inputs_bytes=6_442_450_944,
        weights_bytes=0,
        activations_bytes=6_442_450_944,
        output_bytes=6_442_450_944,
        written_bytes=6_442_450_944,
        flops=0,
    )
    room = Capacity(22 * int(GB), "available memory")
    text = refusal("default", shortfall(footprint, room) or "", 65)
    assert "needs about 51.5 GB" in text and "available memory is 22.0 GB" in text
    assert "use --size fit, or a machine with 65 GB" in text
    assert shortfall(footprint, Capacity(60 * int(GB), "available memory")) is None
    capped = shortfall(footprint, Capacity(60 * int(GB), "available memory", int(20 * GB)))
    assert capped is not None and "address space" in capped


def test_a_fit_travels_as_a_size_string_that_every_worker_applies_alike():
    size = fitted_size({"batch_size": 16, "M": 2})
    check_size(size)
    assert fit_overrides(size) == {"M": 2, "batch_size": 16}
    loaded, source = problem(
        "def forward(self, x):\n    return x", "batch_size = 4096", "[torch.randn(batch_size)]"
    )
    apply_size(loaded, fitted_size({"batch_size": 16}), source)
    assert vars(loaded.module)["batch_size"] == 16
    for bad in ("fit:batch_size", "fit:x=0", "huge"):
        with pytest.raises(TaskLoadError):
            check_size(bad)
    with pytest.raises(TaskLoadError, match="must be resolved"):
        apply_size(loaded, "fit", source)


def test_the_check_refuses_a_terabyte_problem_and_traces_a_small_one_no_further():
    """In-process, as the reference's worker runs it: 1.1 TB of input is refused with the
    one line (nothing allocated); a small problem is let through on its inputs and weights
    alone, without the forward's trace (whose first meta op costs a second of CPU)."""
    huge = SourceFile.from_path(ROOT / "tests" / "shipped_sizes" / "terabyte_gemm.py")
    with pytest.raises(TaskLoadError, match=r"needs about .* use --size fit, or a machine with"):
        refuse_if_too_big(load_problem(huge), huge, "cpu", "default")
    loaded, source = problem(
        LINEAR, "batch_size = 8\nn_in = 16\nn_out = 4", "[torch.randn(8, 16)]", "[16, 4]"
    )
    held = refuse_if_too_big(loaded, source, "cpu", "default")
    assert held is not None and held.activations_bytes == 0
    assert held.forward_bytes == (8 * 16 + 16 * 4 + 4) * F32


def test_the_plan_names_the_sizes_in_one_line_and_in_the_json():
    plan = SizePlan("fit:batch_size=16", {"batch_size": (4096, 16)}, 8 * int(GB))
    assert plan.line() == "sizes: batch_size 16 (shipped 4096) to fit 8.0 GB and 0.02 s a forward"
    assert plan.to_json() == {"batch_size": [4096, 16]}
    assert SizePlan("fit:", {}, 8 * int(GB)).line() == (
        "sizes: as shipped (they fit 8.0 GB and 0.02 s a forward)"
    )
    assert SizePlan("fit:", note="the meta-device trace failed: x").line() == (
        "sizes: as shipped (the meta-device trace failed: x)"
    )
    assert SizePlan("default").line() is None
