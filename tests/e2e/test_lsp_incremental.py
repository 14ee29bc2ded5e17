"""Incremental analysis over LSP: random edits sent as didChange must leave the server with
the same code lenses and diagnostics as the final text opened fresh (issue 19).

The server re-reads only the statements an edit touched (server/analysis.py); this checks
it against a from-scratch read of the same text, through `python -m server` over stdio."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bench.lsp_fuzz import RawServer, code_lenses, open_document

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from lsp_latency import generate_document  # noqa: E402

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
URIS = itertools.count()


@pytest.fixture(scope="module")
def server() -> Iterator[RawServer]:
    raw = RawServer()
    raw.initialize(ROOT)
    yield raw
    raw.close()


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


def span(line: int, character: int, end_line: int, end_character: int) -> dict[str, Any]:
    return {
        "start": {"line": line, "character": character},
        "end": {"line": end_line, "character": end_character},
    }


def normalized(lenses: list[dict], uri: str) -> str:
    return json.dumps(lenses, sort_keys=True).replace(json.dumps(uri)[1:-1], "URI")


def diagnostics(server: RawServer, uri: str, version: int) -> list[dict[str, Any]]:
    published = server.wait_for(
        lambda: (found := server.diagnostics.get(uri)) and found.get("version") == version and found
    )
    return sorted(published["diagnostics"], key=lambda d: json.dumps(d, sort_keys=True))


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=edit_scripts())
@example(script=(SEEDS[0], BROKEN_CLASS))
def test_random_edits_match_a_fresh_read(server: RawServer, script) -> None:
    text, edits = script
    n = next(URIS)
    edited, fresh = f"file:///incremental/edited-{n}.py", f"file:///incremental/fresh-{n}.py"
    open_document(server, edited, text)
    code_lenses(server, edited)  # analysed once before the edits: they are incremental
    version = 1
    for start, end, new in edits:
        version += 1
        change = {"range": {"start": position(text, start), "end": position(text, end)}}
        change["text"] = new
        params = {"textDocument": {"uri": edited, "version": version}, "contentChanges": [change]}
        server.send("textDocument/didChange", params, notify=True)
        text = text[:start] + new + text[end:]
    open_document(server, fresh, text)
    assert normalized(code_lenses(server, edited), edited) == normalized(
        code_lenses(server, fresh), fresh
    )
    assert diagnostics(server, edited, version) == diagnostics(server, fresh, 1)
    for uri in (edited, fresh):
        server.send("textDocument/didClose", {"textDocument": {"uri": uri}}, notify=True)


def test_one_line_edit_in_a_large_file_keeps_its_lenses(server: RawServer) -> None:
    """An edit far from any target leaves the lenses as they were; renaming Model (so that
    every module class becomes a target) changes them."""
    text = generate_document(20_000)
    uri = f"file:///incremental/large-{next(URIS)}.py"
    open_document(server, uri, text)
    before = code_lenses(server, uri)
    assert [lens["command"]["title"] for lens in before] == ["Optimize", "Profile"]
    line = text.split("\n").index("# latency-benchmark: edited here")
    edit = {"range": span(line, 0, line, 0)}
    server.send(
        "textDocument/didChange",
        {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{**edit, "text": "x = 1"}]},
        notify=True,
    )
    assert code_lenses(server, uri) == before
    model = next(i for i, row in enumerate(text.split("\n")) if row.startswith("class Model("))
    rename = {
        "range": span(model, 6, model, 11),
        "text": "Mode1",
    }
    server.send(
        "textDocument/didChange",
        {"textDocument": {"uri": uri, "version": 3}, "contentChanges": [rename]},
        notify=True,
    )
    targets = {lens["command"]["arguments"][0]["target"] for lens in code_lenses(server, uri)}
    assert "Mode1" in targets and "Model" not in targets
