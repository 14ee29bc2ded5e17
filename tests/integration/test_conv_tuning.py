"""The conv passes that change only how the library runs a model (agents/offline/passes/
conv_tuning.py, memory_format.py): cuDNN's algorithm search switched on and restored per call,
torch.compile around eager convolutions, channels_last for 3-D convolutions. On real
KernelBench-style files, each rewrite keeps the weights' names and is judged correct."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import pytest
import torch

from agents.evaluate import EvalOptions, evaluate
from agents.offline.fx.tracing import apply_general_first
from agents.offline.passes.base import Program
from agents.offline.passes.conv_tuning import CompileEpilogue, CudnnBenchmark
from agents.offline.passes.memory_format import ChannelsLast
from agents.task import SourceFile, build_model, call_factory, load_problem
from agents.verify.verdict import Verdict
from tests.conftest import FAST, TESTS

LEVEL2 = TESTS / "kernelbench_style" / "KernelBench" / "level2"
CONV2D = LEVEL2 / "1_Conv2d_GELU_ChannelScale.py"
CONV3D = LEVEL2 / "6_Conv3d_Min_Tanh_Tanh.py"
TRANSPOSED3D = LEVEL2 / "8_ConvTranspose3d_Add_ReLU6.py"
GEMM = LEVEL2 / "2_Gemm_Sigmoid_Sum.py"


def _program(path: Path) -> Program:
    source = SourceFile.from_path(path)
    problem = load_problem(source)
    torch.manual_seed(0)
    init = call_factory(problem.get_init_inputs, source, "get_init_inputs")
    model = build_model(problem.model_class, init, source)
    inputs = call_factory(problem.get_inputs, source, "get_inputs")
    return Program(source.text, "Model", model, inputs, init, "cpu")


def _built(program: Program, source: str) -> torch.nn.Module:
    namespace = types.ModuleType("conv_tuning_rewrite")
    exec(compile(source, "rewrite.py", "exec"), namespace.__dict__)
    model = namespace.ModelNew(*program.init_inputs)
    model.load_state_dict(program.module.state_dict())  # the same names and shapes
    return model


def _judged(path: Path, source: str) -> Verdict:
    options = EvalOptions(**{**FAST.__dict__, "static_check": True})
    result = evaluate(SourceFile.from_path(path), SourceFile(source, "rewrite.py"), options)
    assert result.verdict is Verdict.CORRECT, result.reasons
    return result.verdict


@pytest.mark.parametrize("path", [CONV2D, CONV3D, TRANSPOSED3D])
def test_cudnn_benchmark_is_switched_on_for_the_call_and_restored(path: Path):
    program = _program(path)
    rewrite = CudnnBenchmark().apply(program)
    assert rewrite.source is not None, rewrite.summary
    ast.parse(rewrite.source)
    model = _built(program, rewrite.source)
    seen = []
    conv = next(m for m in model.modules() if "Conv" in type(m).__name__)
    conv.register_forward_pre_hook(lambda *_: seen.append(torch.backends.cudnn.benchmark))
    before = torch.backends.cudnn.benchmark
    with torch.no_grad():
        out = model(*program.inputs)
        torch.testing.assert_close(out, program.module(*program.inputs), rtol=0, atol=0)
        with pytest.raises(RuntimeError):  # a failing call restores the flag all the same
            model(*[x[:, :1] for x in program.inputs])  # too few input channels
    assert seen == [True, True] and torch.backends.cudnn.benchmark is before
    _judged(path, rewrite.source)


def test_compile_epilogue_runs_the_convolution_as_eager_and_fuses_the_rest():
    program = _program(CONV2D)
    rewrite = CompileEpilogue().apply(program)
    assert rewrite.source is not None, rewrite.summary
    assert "Conv2d" in rewrite.summary and rewrite.changes == ["Conv2d left to eager"]
    model = _built(program, rewrite.source)
    with torch.no_grad():
        out = model(*program.inputs)
        expected = program.module(*program.inputs)
    torch.testing.assert_close(out, expected)
    # The convolution was left out of the graph: its forward is dynamo-disabled in place.
    assert "forward" in vars(model.conv) and "forward" not in vars(program.module.conv)
    explained = torch._dynamo.explain(model._forward)(*program.inputs)
    traced = [str(n.target) for g in explained.graphs for n in g.graph.nodes]
    assert not any("conv" in t for t in traced), traced  # no conv in what Inductor compiles
    assert any("gelu" in t for t in traced), traced  # the epilogue is
    _judged(CONV2D, rewrite.source)


def test_compile_epilogue_also_leaves_linear_layers_to_eager():
    program = _program(GEMM)
    rewrite = CompileEpilogue().apply(program)
    assert rewrite.source is not None and rewrite.changes == ["Linear left to eager"]
    _judged(GEMM, rewrite.source)


def test_channels_last_covers_3d_convolutions():
    program = _program(CONV3D)
    rewrite = ChannelsLast().apply(program)
    assert rewrite.source is not None, rewrite.summary
    model = _built(program, rewrite.source)
    with torch.no_grad():
        out = model(*program.inputs)
    torch.testing.assert_close(out, program.module(*program.inputs))
    assert model.conv.weight.is_contiguous(memory_format=torch.channels_last_3d)
    assert out.is_contiguous()
    _judged(CONV3D, rewrite.source)


@pytest.mark.parametrize("make", [CudnnBenchmark, CompileEpilogue, ChannelsLast])
def test_a_model_without_convolutions_gets_no_conv_rewrite(make):
    program = _program(LEVEL2 / "4_Matmul_Dropout_Mean_Softmax.py")
    if make is CompileEpilogue:
        program = _program(TESTS.parent / "bench" / "problems" / "07_swish.py")
    rewrite = apply_general_first(make(), program)
    assert rewrite.source is None and rewrite.summary


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("make", [CudnnBenchmark, CompileEpilogue])
def test_on_the_gpu_the_conv_rewrites_are_judged_correct(make):
    program = _program(CONV2D)
    program = Program(
        program.source,
        "Model",
        program.module.cuda(),
        [x.cuda() for x in program.inputs],
        program.init_inputs,
        "cuda",
    )
    rewrite = make().apply(program)
    assert rewrite.source is not None, rewrite.summary
    options = EvalOptions(**{**FAST.__dict__, "device": "cuda", "threads": None})
    result = evaluate(SourceFile.from_path(CONV2D), SourceFile(rewrite.source, "r.py"), options)
    assert result.verdict is Verdict.CORRECT, result.reasons
