"""Targets and static hints, found from the syntax tree alone (agents/targets/find.py, hints.py)."""

from __future__ import annotations

from pathlib import Path

from agents.targets.find import find_targets, target_at
from agents.targets.hints import find_hints
from server.documents import Document

ROOT = Path(__file__).resolve().parents[2]
GEMM = (ROOT / "bench/problems/13_gemm_divide_sum_scaling.py").read_text()

TRITON = """import torch
import triton
import triton.language as tl


@triton.autotune(configs=[], key=["n"])
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    return out


@triton.jit
def lonely(a_ptr, n, BLOCK: tl.constexpr):
    pass
"""

CUDA = '''import torch
from torch.utils.cpp_extension import load_inline

cuda_src = """
#include <torch/extension.h>
__global__ void scale_kernel(float* x, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}
torch::Tensor scale(torch::Tensor x, double s) { return x; }
"""

ext = load_inline(
    name="scale_ext",
    cpp_sources="torch::Tensor scale(torch::Tensor x, double s);",
    cuda_sources=[cuda_src],
    functions=["scale"],
)


def scale(x):
    return ext.scale(x, 2.0)


def get_inputs():
    return [torch.randn(1024, device="cuda")]
'''


def targets_of(text: str):
    return find_targets(Document("file:///t.py", text, 1).root)


def test_kernelbench_model_is_the_target():
    (target,) = targets_of(GEMM)
    assert (target.name, target.kind, target.ready) == ("Model", "module", True)
    lines = GEMM.split("\n")
    assert lines[target.name_line].startswith("class Model(")
    assert lines[target.end_line].strip() == "return x * self.scaling_factor"


def test_module_without_get_init_inputs_says_what_to_add():
    text = GEMM.replace("def get_init_inputs():", "def other():")
    (target,) = targets_of(text)
    assert not target.ready
    assert "get_init_inputs()" in target.missing
    assert "input_size, hidden_size, scaling_factor" in target.snippet


def test_plain_module_file_has_no_target():
    text = "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def forward(self, x):\n"
    text += "        return x\n"
    assert targets_of(text) == []


def test_submodules_are_not_targets_without_model():
    text = (
        "import torch.nn as nn\n\n"
        "class Block(nn.Module):\n    def forward(self, x):\n        return x\n\n"
        "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.b = Block()\n    def forward(self, x):\n        return self.b(x)\n\n"
        "def get_inputs():\n    return []\n\ndef get_init_inputs():\n    return []\n"
    )
    assert [t.name for t in targets_of(text)] == ["Net"]


def test_triton_launcher_is_the_target_and_covers_its_kernel():
    targets = targets_of(TRITON)
    add = next(t for t in targets if t.name == "add")
    assert add.kind == "triton"
    assert [k.name for k in add.kernels] == ["add_kernel"]
    kernel_line = TRITON.split("\n").index(
        "def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):"
    )
    assert target_at(targets, kernel_line).name == "add"
    # no get_inputs(): exactly what to add, never a guessed shape
    assert not add.ready and "get_inputs()" in add.missing
    assert 'x = torch.randn(..., device="cuda")' in add.snippet
    assert add.snippet.rstrip().endswith("return [x, y]")


def test_triton_kernel_without_launcher_asks_for_one():
    lonely = next(t for t in targets_of(TRITON) if t.name == "lonely")
    assert not lonely.ready and "launcher" in lonely.missing
    assert "lonely[grid](a_ptr, n, BLOCK=...)" in lonely.snippet


def test_cuda_kernels_in_load_inline_strings():
    (target,) = targets_of(CUDA)
    assert (target.name, target.kind, target.ready) == ("scale", "cuda", True)
    (kernel,) = target.kernels
    assert kernel.name == "scale_kernel" and kernel.language == "cuda"
    lines = CUDA.split("\n")
    assert lines[kernel.start_line].startswith("__global__ void scale_kernel")
    assert target.covers(kernel.start_line + 1)


def hints_of(text: str):
    doc = Document("file:///h.py", text, 1)
    return find_hints(doc.root, find_targets(doc.root))


HOT = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        out = x[:0]
        for i in range(x.shape[0]):
            out = torch.cat([out, x[i : i + 1] * 2])
        e = torch.exp(x - x.max(dim=1, keepdim=True).values)
        p = e / e.sum(dim=1, keepdim=True)
        mu = x.mean(dim=-1, keepdim=True)
        var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
        y = (x - mu) / torch.sqrt(var + 1e-5)
        print(y)
        return p + y + out.sum().item()


def prepare(x):
    print(x)  # not per-call code: no hint
    return x.cpu()


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
"""


def test_hints_name_the_slow_pattern_and_its_skill():
    hints = {(h.line, h.code) for h in hints_of(HOT)}
    lines = HOT.split("\n")

    def line_of(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    assert (line_of("for i in range"), "torch-batch-small-ops") in hints
    assert (line_of("torch.cat"), "torch-avoid-redundant-copies") in hints
    assert (line_of("torch.exp"), "torch-library-softmax") in hints
    assert (line_of("mu = x.mean"), "torch-library-layernorm") in hints
    assert (line_of("print(y)"), "torch-avoid-host-sync") in hints
    assert (line_of(".item()"), "torch-avoid-host-sync") in hints
    assert all(h.line < line_of("def prepare") for h in hints_of(HOT))


def test_hints_cover_triton_launchers_but_not_clean_code():
    text = TRITON.replace("    return out\n", "    print(out.sum().item())\n    return out\n", 1)
    codes = [h.code for h in hints_of(text)]
    assert codes == ["torch-avoid-host-sync"]  # print and .item() on one line: one hint
    assert hints_of(GEMM) == []


def test_cpp_extension_caller_is_a_function_target():
    text = CUDA.replace("cuda_sources=[cuda_src],", "").replace('device="cuda"', "")
    (target,) = targets_of(text)
    assert (target.name, target.kind, target.label, target.ready) == (
        "scale",
        "function",
        "kernel",
        True,
    )
