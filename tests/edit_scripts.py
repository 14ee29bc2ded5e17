"""Random edit scripts over seed documents, shared by the analysis's unit test
(tests/unit/test_analysis_fresh_read.py) and its LSP twin (tests/e2e/test_lsp_incremental.py):
one module, so that a unit test imports no e2e test module."""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st

from bench.lsp_latency import generate_document

ROOT = Path(__file__).resolve().parents[1]

TRITON = """import torch
import triton


@triton.jit
def add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(1,)](x, y, out, x.numel(), BLOCK=1024)
    return out.cpu().item()
"""

CUDA = '''import torch
from torch.utils.cpp_extension import load_inline

source = """
__global__ void scale(float* x, int n) { x[threadIdx.x] *= 2; }
"""
ext = load_inline(name="e", cpp_sources="", cuda_sources=[source], functions=["scale"])


def run(x):
    ext.scale(x)
    return x


def get_inputs():
    return [torch.randn(8)]
'''

SEEDS = (
    (ROOT / "bench/problems/13_gemm_divide_sum_scaling.py").read_text(),
    TRITON,
    CUDA,
    generate_document(300),
)
# Typed into SEEDS[0], these kept `Model` a target; the same text opened fresh has none
# (tree-sitter's error recovery with an old tree differs from a fresh parse).
BROKEN_CLASS = [(520, 520, "(class Block(Model):\n    pass\n"), (656, 656, ":\n"), (328, 367, "")]
FRAGMENTS = (
    "\n",
    "\n\n",
    "    ",
    "x",
    "(",
    ")",
    ":",
    '"""',
    "#",
    "é",
    "😀",
    "\r\n",
    "def get_inputs():\n    return []\n",
    "def get_init_inputs():\n    return []\n",
    "class Model(nn.Module):\n    def forward(self, x):\n        return x.item()\n",
    "class Block(Model):\n    pass\n",
    "@triton.jit\ndef k(x):\n    pass\n",
    "def launch(x):\n    k[(1,)](x)\n",
    "ext.scale(x)\n",
    "for i in range(3):\n    y = torch.cat([y, x])\n",
)


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def position(text: str, index: int) -> dict[str, int]:
    """The LSP position (UTF-16 columns) of a string index."""
    line = text.count("\n", 0, index)
    start = text.rfind("\n", 0, index) + 1
    return {"line": line, "character": utf16(text[start:index])}


def settle(text: str, index: int) -> int:
    """A position a client could send: not among the "\\r"s that end a line (the server
    counts lines at "\\n" and clamps a column to the line without its trailing "\\r")."""
    line_end = text.find("\n", index)
    line_end = len(text) if line_end < 0 else line_end
    line_start = text.rfind("\n", 0, index) + 1
    return min(index, line_start + len(text[line_start:line_end].rstrip("\r")))


@st.composite
def edit_scripts(draw: st.DrawFn) -> tuple[str, list[tuple[int, int, str]]]:
    """A seed text and edits on it: (start, end, new text), as string indexes of the text
    at the time of each edit (they land on character boundaries, as a client's do)."""
    seed = text = draw(st.sampled_from(SEEDS))
    edits = []
    for _ in range(draw(st.integers(1, 8))):
        start = settle(text, draw(st.integers(0, len(text))))
        end = draw(st.integers(start, min(len(text), start + draw(st.sampled_from([0, 3, 40])))))
        end = max(start, settle(text, end))
        pieces = draw(st.lists(st.sampled_from(FRAGMENTS), max_size=3))
        new = "".join(pieces)
        edits.append((start, end, new))
        text = text[:start] + new + text[end:]
    return seed, edits
