"""The offline passes that wrap or fuse a forward: torch-compile, channels-last, cuda-graphs and
cpp-elementwise. Programs are built here in-process (tests are trusted code; in production the
passes run only in the sandbox child), and every emitted module goes through the real static
checker and, where this machine can run it, the real verifier."""

from __future__ import annotations

import copy
import types

import pytest
import torch

from agents.evaluate import EvalOptions, evaluate
from agents.offline.fx import tracing
from agents.offline.passes import cpp_elementwise
from agents.offline.passes.base import PassError, Program
from agents.offline.passes.compile import TorchCompile, measure_compile_s
from agents.offline.passes.cpp_elementwise import CppElementwise
from agents.offline.passes.cuda_graphs import CudaGraphs
from agents.offline.passes.memory_format import ChannelsLast
from agents.task import SourceFile, build_model, call_factory, load_problem
from agents.verify.static_check import check_candidate
from agents.verify.verdict import Verdict
from tests.conftest import ROOT

BENCH = ROOT / "bench" / "problems"
JUDGE = EvalOptions(measure=False, jail=False, threads=1)


def program(name: str, device: str = "cpu", source: str | None = None) -> Program:
    reference = SourceFile.from_path(BENCH / f"{name}.py")
    if source is not None:
        reference = SourceFile(source, reference.path)
    problem = load_problem(reference)
    torch.manual_seed(0)
    init_inputs = call_factory(problem.get_init_inputs, reference, "get_init_inputs")
    model = build_model(problem.model_class, init_inputs, reference)
    inputs = call_factory(problem.get_inputs, reference, "get_inputs")
    return Program(reference.text, "Model", model, inputs, init_inputs, device)


def judge(name: str, source: str):
    reference = SourceFile.from_path(BENCH / f"{name}.py")
    return evaluate(reference, SourceFile(source, "cand.py"), JUDGE)


def instantiate(source: str, init_inputs: list) -> torch.nn.Module:
    namespace = types.ModuleType("kernel_agent_test_candidate")
    exec(compile(source, "cand.py", "exec"), namespace.__dict__)
    return namespace.ModelNew(*init_inputs)


def assert_clean(source: str) -> None:
    assert check_candidate(source) == []


# -- torch-compile ---------------------------------------------------------------------------


def test_torch_compile_wraps_forward_and_compiles_only_when_called():
    prog = program("21_residual_conv_block")
    rewrite = TorchCompile().apply(prog)
    source = rewrite.source
    assert source is not None and rewrite.method == "source"
    assert_clean(source)  # torch.compile is not builtins.compile
    assert "torch.compile(forward, mode=_COMPILE_MODE, dynamic=False)" in source
    assert '_COMPILE_MODE = "default"' in source
    assert "def _forward(self, x):" in source and "def forward(self, x):" in source
    model = instantiate(source, prog.init_inputs)
    model.load_state_dict(prog.module.state_dict())  # same parameter names
    assert getattr(model, "_torch_compiled_forward", None) is None  # nothing compiled yet


def test_torch_compile_mode_follows_the_device_and_refuses_twice():
    cuda = TorchCompile().apply(program("09_gemm_relu", device="cuda")).source
    assert cuda is not None and '_COMPILE_MODE = "max-autotune-no-cudagraphs"' in cuda
    again = Program(cuda, "ModelNew", None, [], [], "cuda")
    refused = TorchCompile().apply(again)
    assert refused.source is None and "already" in refused.summary


def test_torch_compile_declines_a_load_inline_kernel():
    text = (ROOT / "tests" / "candidates" / "linear_relu_cpp.py").read_text()
    prog = Program(text, "ModelNew", None, [], [], "cpu")
    refused = TorchCompile().apply(prog)
    assert refused.source is None and "extension" in refused.summary


@pytest.mark.slow
def test_torch_compile_rewrite_is_judged_correct_and_its_compile_time_measured():
    prog = program("16_conv_scale_shift_relu")
    source = TorchCompile().apply(prog).source
    result = judge("16_conv_scale_shift_relu", source)
    assert result.verdict is Verdict.CORRECT, result.reasons
    assert result.state_dict_compatible is True and result.reload_check == "passed"
    probe = Program(source, "ModelNew", None, prog.inputs, prog.init_inputs, "cpu")
    assert measure_compile_s(probe) >= 0.0


# -- channels-last ---------------------------------------------------------------------------


def test_load_state_dict_keeps_channels_last_strides():
    """The reason the conversion survives the reviewer's reload: loads copy in place."""
    conv = torch.nn.Conv2d(3, 8, 3)
    conv.weight.data = conv.weight.data.contiguous(memory_format=torch.channels_last)
    pointer = conv.weight.data_ptr()
    fresh = {key: torch.randn_like(value).contiguous() for key, value in conv.state_dict().items()}
    conv.load_state_dict(fresh)
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert conv.weight.data_ptr() == pointer and torch.equal(conv.weight, fresh["weight"])


@pytest.mark.parametrize(
    "name", ["02_conv2d", "11_conv_bias_scale_clamp", "21_residual_conv_block"]
)
def test_channels_last_is_correct_and_keeps_the_state_dict(name):
    prog = program(name)
    rewrite = ChannelsLast().apply(prog)
    assert rewrite.source is not None, rewrite.summary
    assert_clean(rewrite.source)
    model = instantiate(rewrite.source, prog.init_inputs)
    assert list(model.state_dict()) == list(prog.module.state_dict())
    result = judge(name, rewrite.source)
    assert result.verdict is Verdict.CORRECT, result.reasons
    assert result.state_dict_compatible is True and result.reload_check == "passed"


def test_channels_last_converts_weights_on_first_call_and_returns_contiguous():
    prog = program("11_conv_bias_scale_clamp")
    model = instantiate(ChannelsLast().apply(prog).source, prog.init_inputs)
    model.load_state_dict(prog.module.state_dict())
    assert model.conv.weight.is_contiguous()  # nothing converted at construction
    with torch.no_grad():
        out = model(*prog.inputs)
        expected = prog.module(*prog.inputs)
    assert model.conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert out.is_contiguous()
    torch.testing.assert_close(out, expected)


def test_channels_last_declines_without_a_conv():
    rewrite = ChannelsLast().apply(program("07_swish"))
    assert rewrite.source is None and "convolution" in rewrite.summary


# -- cuda-graphs -----------------------------------------------------------------------------


def test_cuda_graphs_declines_on_the_cpu():
    rewrite = CudaGraphs().apply(program("21_residual_conv_block"))
    assert rewrite.source is None and "CUDA" in rewrite.summary


def test_cuda_graphs_source_passes_the_side_stream_rule():
    prog = program("21_residual_conv_block", device="cuda")
    if torch.cuda.is_available():
        prog.module.cuda()
        prog.inputs = [x.cuda() for x in prog.inputs]
    rewrite = CudaGraphs().apply(prog)
    source = rewrite.source
    assert source is not None, rewrite.summary
    # torch.cuda.graph captures on a private stream, but the rule only sees the names the
    # candidate uses; PyTorch's recipe (warm-up under torch.cuda.stream) would be refused.
    assert_clean(source)
    assert "torch.cuda.graph(graph)" in source and "torch.cuda.Stream" not in source
    assert "return _cloned(output)" in source
    model = instantiate(source, prog.init_inputs)
    assert list(model.state_dict()) == list(prog.module.state_dict())


def test_cuda_graphs_declines_random_ops():
    text = (
        (BENCH / "07_swish.py")
        .read_text()
        .replace(
            "return x * torch.sigmoid(x)",
            "return torch.nn.functional.dropout(x * torch.sigmoid(x))",
        )
    )
    rewrite = CudaGraphs().apply(program("07_swish", device="cuda", source=text))
    assert rewrite.source is None and "random" in rewrite.summary


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_graphs_rewrite_is_judged_correct_on_cuda():
    prog = program("21_residual_conv_block", device="cuda")
    prog.module.cuda()
    prog.inputs = [x.cuda() for x in prog.inputs]
    source = CudaGraphs().apply(prog).source
    reference = SourceFile.from_path(BENCH / "21_residual_conv_block.py")
    options = EvalOptions(device="cuda", measure=False, jail=False)
    result = evaluate(reference, SourceFile(source, "cand.py"), options)
    assert result.verdict is Verdict.CORRECT, result.reasons
    assert result.state_dict_compatible is True and result.reload_check == "passed"


# -- cpp-elementwise -------------------------------------------------------------------------


def test_cpp_elementwise_fuses_a_conv_epilogue_per_channel_and_in_place():
    rewrite = CppElementwise().apply(program("11_conv_bias_scale_clamp"))
    source = rewrite.source
    assert source is not None and rewrite.method == "fx"
    assert_clean(source)
    assert rewrite.changes[0] == "fused 3 elementwise ops: add, mul, clamp"
    assert "torch::Tensor out = l0;" in source  # the conv output is overwritten
    assert "const float v1 = p1[c];" in source  # the (C, 1, 1) bias, by channel
    assert "-ffast-math" not in source and '"-ffp-contract=off"' in source
    assert "self._fused_epilogue(conv, self.bias, 0.5, 0.0, 1.0)" in source
    init = source.index("def __init__")
    assert "_elementwise_extension()" not in source[init : source.index("def forward")]


def test_cpp_elementwise_reads_an_input_without_writing_it():
    rewrite = CppElementwise().apply(program("07_swish"))
    assert rewrite.source is not None and rewrite.changes == [
        "fused 2 elementwise ops: sigmoid, mul"
    ]
    assert "torch::Tensor out = torch::empty_like(l0);" in rewrite.source
    assert "#pragma omp parallel for simd" in rewrite.source
    assert_clean(rewrite.source)


def test_cpp_elementwise_graph_keeps_the_forward_semantics():
    """The rewritten graph, run with the fused ops' PyTorch reference, gives the original."""
    prog = program("21_residual_conv_block")
    gm = tracing.trace(prog)
    epilogue = cpp_elementwise._find_epilogue(gm)
    assert [leaf.node.name for leaf in epilogue.leaves] == ["bn2", "x"]
    cpp_elementwise._replace(gm, epilogue)
    model = copy.deepcopy(prog.module)
    with torch.no_grad():
        torch.testing.assert_close(gm(*prog.inputs), model(*prog.inputs), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("name", "device", "why"),
    [
        ("09_gemm_relu", "cpu", "1 op"),
        ("02_conv2d", "cpu", "does not end with a fusable elementwise op"),
        ("11_conv_bias_scale_clamp", "cuda", "CPU"),
    ],
)
def test_cpp_elementwise_declines(name, device, why):
    try:
        rewrite = CppElementwise().apply(program(name, device=device))
    except PassError as error:
        assert why in str(error)
    else:
        assert rewrite.source is None and why in rewrite.summary


@pytest.mark.slow
def test_cpp_elementwise_rewrite_builds_and_is_judged_correct():
    rewrite = CppElementwise().apply(program("11_conv_bias_scale_clamp"))
    result = judge("11_conv_bias_scale_clamp", rewrite.source)
    assert result.verdict is Verdict.CORRECT, result.reasons
    assert result.state_dict_compatible is True and result.reload_check == "passed"
