"""Every fp32 GEMM spelling is a triton-gemm site (issue 31): nn.Linear, F.linear, matmul / `@`,
mm, bmm, addmm and baddbmm with their beta and alpha, broadcast batch dims, and einsums that
are GEMMs; and a GEMM followed by ops no kernel fuses (BatchNorm in training mode, dropout in
training mode, a softmax over a row wider than one tile) is still replaced, the rest of
forward left as it was. Each rewrite runs in Triton's CPU interpreter against float64 (the
verifier's rule); an einsum's lowering is also checked alone on drawn equations. Sums that
are no GEMM are refused with a one-line reason. The tile table and its per-shape pruning are
checked as text and as the Python the kernels run; a batched GEMM's tuning key carries its
batch.
"""

from __future__ import annotations

import importlib.util
import itertools
import string

import pytest
import torch
import torch.fx
import triton
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.offline.fx import ops, tracing
from agents.offline.fx.tracing import apply_general_first
from agents.offline.passes.triton_gemm import TritonGemm
from agents.offline.passes.triton_gemm_einsum import lower_einsums, parse
from agents.offline.passes.triton_gemm_kernel import LARGE_MN, TILES, helpers, tile_config
from memory.tuning import shape_class, site_key
from tests.integration.test_triton_gemm import gemm_problem, program, rewrite
from tests.integration.test_triton_gemm_interpreter import Interpreter, interpreted

W = "        self.weight = nn.Parameter(torch.randn({}) / 5)\n"
B = "        self.bias = nn.Parameter(torch.randn({}))\n"

FORMS = {
    "f_linear_bias": (
        "        return F.linear(args[0], self.weight, self.bias)",
        "[torch.randn(2, 9, 21)]",
        W.format("13, 21") + B.format("13"),
    ),
    "matmul_operator": (
        "        return args[0] @ args[1]",
        "[torch.randn(19, 23), torch.randn(23, 11)]",
    ),
    "torch_mm": (
        "        return torch.mm(args[0], args[1])",
        "[torch.randn(19, 23), torch.randn(23, 11)]",
    ),
    "mm_method": (
        "        return args[0].mm(args[1])",
        "[torch.randn(19, 23), torch.randn(23, 11)]",
    ),
    "bmm": (
        "        return torch.bmm(args[0], args[1])",
        "[torch.randn(3, 9, 23), torch.randn(3, 23, 11)]",
    ),
    "addmm_beta_alpha": (
        "        return torch.addmm(args[2], args[0], args[1], beta=0.5, alpha=-1.5)",
        "[torch.randn(19, 23), torch.randn(23, 11), torch.randn(19, 11)]",
    ),
    "addmm_beta_zero_ignores_nan": (
        "        return torch.addmm(args[2], args[0], args[1], beta=0.0)",
        "[torch.randn(19, 23), torch.randn(23, 11), torch.full((11,), float('nan'))]",
    ),
    "baddbmm": (
        "        return torch.baddbmm(args[2], args[0], args[1])",
        "[torch.randn(3, 9, 23), torch.randn(3, 23, 11), torch.randn(3, 9, 11)]",
    ),
    "baddbmm_scaled_broadcast_bias": (
        "        y = torch.baddbmm(self.bias, args[0], args[1], beta=2.0, alpha=0.5)\n"
        "        return torch.relu(y)",
        "[torch.randn(3, 9, 23), torch.randn(3, 23, 11)]",
        B.format("11"),
    ),
    "matmul_broadcast_batch": (
        "        return torch.matmul(args[0], args[1])",
        "[torch.randn(2, 1, 9, 13), torch.randn(3, 13, 7)]",
    ),
    "matmul_matrix_by_batch": (
        "        return torch.matmul(args[0], args[1]) * 2.0",
        "[torch.randn(9, 13), torch.randn(4, 13, 7)]",
    ),
}
EINSUMS = {
    "bij,bjk->bik": ("[torch.randn(3, 9, 23), torch.randn(3, 23, 11)]", True),
    "ij,jk->ik": ("[torch.randn(19, 23), torch.randn(23, 11)]", True),
    "bik,kj->bij": ("[torch.randn(2, 9, 23), torch.randn(23, 11)]", True),
    "ij,kj->ik": ("[torch.randn(19, 23), torch.randn(11, 23)]", True),
    "ji,jk->ik": ("[torch.randn(23, 19), torch.randn(23, 11)]", True),
    "bhij,bhjk->bhik": ("[torch.randn(2, 3, 9, 13), torch.randn(2, 3, 13, 7)]", True),
    "ik,kj": ("[torch.randn(19, 23), torch.randn(23, 11)]", True),
    "bij,bjk->bki": ("[torch.randn(3, 9, 23), torch.randn(3, 23, 11)]", False),
    "ijk,jkl->il": ("[torch.randn(9, 5, 7), torch.randn(5, 7, 11)]", True),
    "bij,jkl->bikl": ("[torch.randn(2, 9, 13), torch.randn(13, 3, 5)]", False),
    "bxk,kn->bxn": ("[torch.randn(2, 3, 13), torch.randn(13, 5)]", True),
    "i j , j k -> i k": ("[torch.randn(19, 23), torch.randn(23, 11)]", True),
}
"""equation -> (inputs, whether the epilogue after it (`* 2.0`) fuses: the output is the
GEMM's own (batch, M, N) layout, no view between)."""


@pytest.fixture(scope="module")
def interpreter():
    worker = Interpreter()
    yield worker
    worker.close()


def _einsum_problem(equation: str, inputs: str) -> str:
    return gemm_problem(
        f"        return torch.einsum({equation!r}, args[0], args[1]) * 2.0", inputs
    )


@pytest.mark.parametrize("name", list(FORMS))
def test_each_gemm_spelling_is_rewritten_and_matches_float64(interpreter, name):
    text = gemm_problem(*FORMS[name])
    result = rewrite(text)
    assert result.source is not None, result.summary
    assert len(result.changes) == 1 and "one Triton kernel" in result.changes[0]
    interpreted(interpreter, text, tiles=2)


@pytest.mark.parametrize("equation", list(EINSUMS))
def test_each_gemm_einsum_is_rewritten_and_matches_float64(interpreter, equation):
    inputs, fused = EINSUMS[equation]
    text = _einsum_problem(equation, inputs)
    result = rewrite(text)
    assert result.source is not None, result.summary
    (change,) = result.changes
    assert change.startswith("einsum('") and "one Triton kernel" in change
    assert ("* 2.0" in change) == fused, change
    assert "torch.einsum" not in result.source.split("class ModelNew")[1]
    interpreted(interpreter, text, tiles=2)


BN_GELU_RELU = """
batch_size = 24
in_features = 40
out_features = 36


class Model(nn.Module):
    def __init__(self, in_features, out_features, bn_eps=1e-5, bn_momentum=0.1):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.batch_norm = nn.BatchNorm1d(out_features, eps=bn_eps, momentum=bn_momentum)

    def forward(self, x):
        x = self.gemm(x)
        x = self.batch_norm(x)
        x = torch.nn.functional.gelu(x)
        x = torch.relu(x)
        return x


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
"""
DROPOUT_SOFTMAX = """
batch_size = 24
in_features = 40
out_features = 300
dropout_p = 0.2


class Model(nn.Module):
    def __init__(self, in_features, out_features, dropout_p):
        super(Model, self).__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, x):
        x = self.matmul(x)
        x = self.dropout(x)
        x = torch.softmax(x, dim=1)
        return x


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, dropout_p]
"""
HEADER = "import torch\nimport torch.nn as nn\n"


def _forward(source: str) -> str:
    return source[source.index("    def forward") :]


def test_a_gemm_before_training_batchnorm_is_replaced_and_the_rest_kept(interpreter):
    text = HEADER + BN_GELU_RELU
    result = rewrite(text)
    assert result.source is not None, result.summary
    assert result.changes == ["self.gemm → + bias → _tgemm_kernel_0: one Triton kernel"]
    forward = _forward(result.source)
    assert "self._triton_gemm_0(" in forward and "self.batch_norm(" in forward
    assert "gelu(" in forward and "relu(" in forward
    interpreted(interpreter, text, tiles=2)


def test_a_gemm_before_training_dropout_and_a_wide_softmax_is_replaced_alone():
    result = rewrite(HEADER + DROPOUT_SOFTMAX)
    assert result.source is not None, result.summary
    assert result.changes == ["self.matmul → + bias → _tgemm_kernel_0: one Triton kernel"]
    forward = _forward(result.source)
    order = [forward.index(s) for s in ("self._triton_gemm_0(", "self.dropout(", "softmax(")]
    assert order == sorted(order)  # dropout still draws its mask from the kernel's output


def test_a_wide_softmax_after_a_gemm_matches_float64(interpreter):
    text = gemm_problem(
        "        return torch.softmax(args[0] @ args[1], dim=-1)",
        "[torch.randn(19, 23), torch.randn(23, 300)]",
    )
    interpreted(interpreter, text, tiles=2)


REFUSED = {
    "...ij,...jk->...ik": "'...'",
    "ij,jk,kl->il": "3 operands",
    "ii,ij->j": "repeated index",
    "ij,ij->ij": "no contracted index",
    "ij,jk->k": "sums index 'i' of one operand alone",
}


@pytest.mark.parametrize("equation", list(REFUSED))
def test_an_einsum_that_is_no_gemm_is_refused_in_one_line(equation):
    operands = {
        "ij,jk,kl->il": "[torch.randn(5, 6), torch.randn(6, 7), torch.randn(7, 4)]",
        "...ij,...jk->...ik": "[torch.randn(2, 5, 6), torch.randn(2, 6, 7)]",
        "ii,ij->j": "[torch.randn(6, 6), torch.randn(6, 7)]",
        "ij,ij->ij": "[torch.randn(6, 7), torch.randn(6, 7)]",
    }.get(equation, "[torch.randn(5, 6), torch.randn(6, 7)]")
    names = ", ".join(f"args[{i}]" for i in range(operands.count("torch.randn")))
    text = gemm_problem(f"        return torch.einsum({equation!r}, {names})", operands)
    result = rewrite(text)
    assert result.source is None and "\n" not in result.summary
    assert "no fp32 nn.Linear" in result.summary and REFUSED[equation] in result.summary


def test_a_matrix_vector_product_is_refused_in_one_line():
    text = gemm_problem("        return args[0] @ args[1]", "[torch.randn(5, 6), torch.randn(6)]")
    result = rewrite(text)
    assert result.source is None and "matrix-vector" in result.summary


# -- einsum lowering alone, on drawn GEMM equations -------------------------------------------


@st.composite
def gemm_einsums(draw):
    """(equation, a's shape, b's shape) of a GEMM einsum: index groups of drawn sizes, each
    term a drawn permutation of its indices."""
    letters = iter(string.ascii_lowercase)
    groups = {
        name: [next(letters) for _ in range(draw(st.integers(low, high)))]
        for name, low, high in (("batch", 0, 2), ("rows", 0, 2), ("cols", 0, 2), ("k", 1, 2))
    }
    size = {c: draw(st.integers(1, 4)) for c in itertools.chain(*groups.values())}
    a = draw(st.permutations(groups["batch"] + groups["rows"] + groups["k"]))
    b = draw(st.permutations(groups["batch"] + groups["k"] + groups["cols"]))
    out = draw(st.permutations(groups["batch"] + groups["rows"] + groups["cols"]))
    equation = f"{''.join(a)},{''.join(b)}->{''.join(out)}"
    return equation, [size[c] for c in a], [size[c] for c in b]


class _Einsum(torch.nn.Module):
    def __init__(self, equation: str) -> None:
        super().__init__()
        self.equation = equation

    def forward(self, a, b):
        return torch.einsum(self.equation, a, b)


@settings(max_examples=60, deadline=None)
@given(drawn=gemm_einsums())
def test_a_drawn_gemm_einsum_lowers_to_views_around_one_matmul_of_the_same_value(drawn):
    equation, shape_a, shape_b = drawn
    assert not isinstance(parse(equation), str)
    gm = torch.fx.symbolic_trace(_Einsum(equation))
    a, b = torch.randn(shape_a, dtype=torch.float64), torch.randn(shape_b, dtype=torch.float64)
    tracing.propagate(gm, [a.float(), b.float()])
    assert lower_einsums(gm) == (1, [])
    gm.recompile()
    names = [ops.op_name(n) for n in gm.graph.nodes]
    assert "einsum" not in names and names.count("matmul") == 1
    torch.testing.assert_close(gm(a, b), torch.einsum(equation, a, b), rtol=1e-12, atol=1e-12)


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(drawn=gemm_einsums())
def test_a_drawn_gemm_einsum_matches_float64_in_the_interpreter(interpreter, drawn):
    equation, shape_a, shape_b = drawn
    text = _einsum_problem(equation, f"[torch.randn({shape_a}), torch.randn({shape_b})]")
    interpreted(interpreter, text, tiles=2)


# -- the tile table and its pruning -----------------------------------------------------------

SHARED_MEMORY = 227 * 1024  # bytes a Hopper block may take


def test_the_table_has_the_large_hopper_tiles_within_shared_memory():
    large = {(t.block_m, t.block_n, t.stages) for t in TILES if t.warps == 8}
    for shape in ((128, 256), (256, 128)):
        assert {s for m, n, s in large if (m, n) == shape} >= {3, 4}, shape
    for tile in TILES:
        stage = (tile.block_m * tile.block_k + tile.block_k * tile.block_n) * 4
        assert stage * tile.stages <= SHARED_MEMORY, tile


@pytest.fixture(scope="module")
def prune(tmp_path_factory):
    """`_tgemm_prune` as the generated module defines it (@triton.jit reads a file)."""
    path = tmp_path_factory.mktemp("helpers") / "tgemm_helpers.py"
    path.write_text("import math\nimport torch\nimport triton\nimport triton.language as tl\n\n")
    path.write_text(path.read_text() + helpers([()]))
    spec = importlib.util.spec_from_file_location("tgemm_helpers", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._tgemm_prune


def _configs():
    return [triton.Config({k: v for k, v in tile_config(t).items() if k.isupper()}) for t in TILES]


def _tiles(configs):
    return {(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) for c in configs}


@given(
    m=st.integers(1, 1 << 16),
    n=st.integers(1, 1 << 16),
    batch=st.sampled_from([1, 2, 128]),
)
def test_pruning_keeps_fitting_tiles_and_only_large_ones_for_a_large_gemm(prune, m, n, batch):
    configs = _configs()
    kept = prune(configs, {"M": m, "N": n, "B": batch})
    assert kept and all(any(c is d for d in configs) for c in kept)
    tiles = _tiles(kept)
    if batch * m * n >= LARGE_MN and m >= 128 and n >= 128:
        assert min(bm * bn for bm, bn in tiles) >= 128 * 128
    if m >= 256 and n >= 256:
        assert {(128, 256), (256, 128)} <= tiles
    if max(m, n) <= 32:
        assert all(bm <= 32 and bn <= 64 for bm, bn in tiles)
    fit_m, fit_n = max(32, triton.next_power_of_2(m)), max(32, triton.next_power_of_2(n))
    if any(t.block_m <= fit_m and t.block_n <= fit_n for t in TILES):
        assert all(bm <= fit_m and bn <= fit_n for bm, bn in tiles)


# -- the tuning key ----------------------------------------------------------------------------


def test_a_batched_gemm_is_keyed_by_its_batch_and_gets_its_remembered_tile_back():
    assert shape_class(512, 512, 512, 128) == "B128xM512xN512xK512"
    assert shape_class(512, 512, 512) == shape_class(512, 512, 512, 1) == "M512xN512xK512"
    text = gemm_problem(
        "        return torch.bmm(args[0], args[1])",
        "[torch.randn(100, 9, 23), torch.randn(100, 23, 11)]",
    )
    (site,) = rewrite(text).tuning_sites
    assert (site.op_signature, site.shape_class) == ("bmm:float32", "B128xM16xN16xK32")
    remembered = tile_config(TILES[-1])
    warm = program(text)
    warm.tuning = {site_key(site.op_signature, site.shape_class): remembered}
    result = apply_general_first(TritonGemm(), warm)
    assert result.tuning_sites[0].from_memory and "tile from memory" in result.summary
    assert "configs=_TGEMM_TILES" not in (result.source or "")
    einsum = rewrite(_einsum_problem("bik,kj->bij", "[torch.randn(2, 9, 23), torch.randn(23, 11)]"))
    assert einsum.tuning_sites[0].op_signature == "einsum+mul:float32"
    assert einsum.tuning_sites[0].shape_class == "M32xN16xK32"  # a's leading dims fold into M
