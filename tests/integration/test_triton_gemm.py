"""The triton-gemm pass: fp32 GEMMs + epilogues → one Triton kernel with 3xTF32 products.

Without a GPU the generated sources are checked as text: they parse, pass the static checker,
keep Model's constructor, parameter names and state_dict, bake no sizes and take their tiles
from the given table; refusals say why; the gate and planner offer the pass on CUDA only; and
3xTF32's accuracy is checked by emulating TF32 rounding
(tests/integration/test_triton_gemm_interpreter.py
runs the kernels in Triton's CPU interpreter). The `cuda` tests run the kernels on a GPU
against fp32 eager and float64, time them, and put one through the verifier."""

from __future__ import annotations

import ast
import copy
import inspect
import re
import types

import pytest
import torch

from agents.offline.fx.tracing import apply_general_first
from agents.offline.passes.base import Program, Rewrite
from agents.offline.passes.triton_gemm import TritonGemm
from agents.offline.passes.triton_gemm_kernel import ROW_TILES, TILES, Tile, render_tiles
from agents.offline.registry import DEVICE_ONLY
from agents.offline.roles import OfflinePlanner
from agents.profile.report import Ceilings, OpStat, Profile, Roofline
from agents.roles.base import PlanningContext, SkillBrief
from agents.verify.compare import compare_output
from agents.verify.static_check import check_candidate
from memory.gate import gate
from tests.conftest import ROOT

BENCH = ROOT / "bench" / "problems"
SKILL = "triton-gemm-3xtf32-epilogue"
HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def load(text: str, path: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = path
    exec(compile(text, path, "exec"), module.__dict__)
    return module


def program(text: str, device: str = "cuda", path: str = "problem.py") -> Program:
    """The reference as the sandboxed pass sees it (CPU tensors: tracing needs no GPU)."""
    module = load(text, path, "triton_gemm_problem")
    torch.manual_seed(0)
    init = module.get_init_inputs()
    model = module.Model(*init)
    if device == "cuda" and torch.cuda.is_available():
        model, inputs = model.cuda(), [x.cuda() for x in module.get_inputs()]
    else:
        inputs = module.get_inputs()
    return Program(text, "Model", model, inputs, init, device)


def rewrite(text: str, device: str = "cuda") -> Rewrite:
    return apply_general_first(TritonGemm(), program(text, device))


def linear_problem(
    epilogue: str, m: int = 37, k: int = 70, n: int = 45, init: str = "", batch: int = 0
) -> str:
    """y = Linear(x) (or, with `batch`, a bmm by a (batch, K, N) weight) then `epilogue`: an
    expression of y, the residual r, self.scale and the (N,) parameter self.shift."""
    gemm, lead = "self.linear(x)", ""
    if batch:
        gemm, lead = "torch.bmm(x, self.weight)", f"{batch}, "
        init = f"        self.weight = nn.Parameter(torch.randn({lead}k, n) / k**0.5)\n" + init
    return (
        HEADER
        + f"""M, K, N = {m}, {k}, {n}


class Model(nn.Module):
    def __init__(self, k, n, scale):
        super().__init__()
        self.linear = nn.Linear(k, n)
        self.scale = scale
        self.shift = nn.Parameter(torch.randn(n))
{init}
    def forward(self, x, r):
        y = {gemm}
        return {epilogue}


def get_inputs():
    return [torch.randn({lead}M, K), torch.randn({lead}M, N)]


def get_init_inputs():
    return [K, N, 0.75]
"""
    )


def gemm_problem(forward: str, inputs: str, init: str = "") -> str:
    """Any forward over the inputs `inputs` builds (a Python list expression)."""
    return (
        HEADER
        + f"""
class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init or "        pass"}

    def forward(self, *args):
{forward}


def get_inputs():
    return {inputs}


def get_init_inputs():
    return []
"""
    )


def bench(name: str, cap: int = 64, sizes: dict[str, int] | None = None) -> str:
    """A bench problem with its size constants capped and made odd (no tile divides them),
    or set to `sizes`."""
    text = next(BENCH.glob(f"{name}*.py")).read_text()

    def size(match: re.Match[str]) -> str:
        value = min(int(match[2]), cap)
        value = (sizes or {}).get(match[1], value - (1 - value % 2))
        return f"{match[1]} = {value}"

    return re.sub(r"^([A-Z][A-Z0-9_]*) = (\d+)$", size, text, flags=re.M)


def generated(source: str) -> str:
    """The part the pass wrote: kernels, helpers and the class (not the problem's prelude)."""
    return source[source.index("_TGEMM_") :]


# -- the source as text -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["01_matmul", "09_gemm_relu", "15_gemm_scale_shift", "19_mlp"])
def test_source_parses_keeps_names_and_loads_the_state_dict(name, tmp_path):
    text = bench(name)
    result = rewrite(text)
    assert result.source is not None, result.summary
    ast.parse(result.source)
    assert check_candidate(result.source) == []
    assert 'input_precision="tf32x3"' in result.source
    file = tmp_path / "candidate.py"  # @triton.jit reads its source from the file
    file.write_text(result.source)
    problem, candidate = load(text, "problem.py", "p"), load(result.source, str(file), "c")
    assert inspect.signature(candidate.ModelNew.__init__) == inspect.signature(
        problem.Model.__init__
    )
    init = problem.get_init_inputs()
    model, new = problem.Model(*init), candidate.ModelNew(*init)
    assert list(new.state_dict()) == list(model.state_dict())
    new.load_state_dict(model.state_dict())  # strict: same keys, same shapes


def test_linear_with_a_scalar_attribute_reads_it_at_call_time():
    result = rewrite(bench("15_gemm_scale_shift"))
    assert result.changes == [
        "self.linear → + bias → * self.scale → + self.shift → _tgemm_kernel_0: one Triton kernel"
    ]
    assert (
        "self._triton_gemm_0(x, self.linear.weight, self.linear.bias, self.scale, self.shift)"
        in (result.source or "")
    )
    assert "_check_specialised" not in (result.source or "")


def test_no_size_is_baked_into_the_source():
    sources = [
        rewrite(linear_problem("torch.relu(y + r)", m, k, n)).source
        for m, k, n in [(37, 70, 45), (131, 29, 203)]
    ]
    assert sources[0] and sources[1]
    assert generated(sources[0]) == generated(sources[1])
    assert not re.search(r"\b(37|70|45)\b", generated(sources[0]))


def test_tiles_come_from_the_given_table_in_order():
    sizes = {"BATCH": 3, "SEQ": 37, "DIM": 45, "HEADS": 3}
    first = rewrite(bench("20_attention", sizes=sizes)).source  # plain and row-spanning tiles
    assert first == rewrite(bench("20_attention", sizes=sizes)).source  # same source again
    tables = {}
    for node in ast.parse(first).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id in ("_TGEMM_TILES", "_TGEMM_ROW_TILES"):
            tables[target.id] = [_tile(call) for call in node.value.elts]
    assert tables == {"_TGEMM_TILES": list(TILES), "_TGEMM_ROW_TILES": list(ROW_TILES)}
    given_table = (Tile(16, 32, 64, 4, 2, 1), Tile(256, 16, 8, 1, 16, 7))
    rendered = ast.parse(render_tiles("T", given_table)).body[0]
    assert [_tile(call) for call in rendered.value.elts] == list(given_table)


def _tile(call: ast.Call) -> Tile:
    meta = ast.literal_eval(call.args[0])
    keywords = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    return Tile(
        meta["BLOCK_M"],
        meta.get("BLOCK_N", 0),
        meta["BLOCK_K"],
        meta["GROUP_M"],
        keywords["num_warps"],
        keywords["num_stages"],
    )


def test_row_reductions_take_the_row_table_and_wide_rows_stay_in_torch():
    narrow = rewrite(linear_problem("torch.softmax(y, dim=-1)")).source or ""
    assert "configs=_TGEMM_ROW_TILES" in narrow and "span=True" in narrow
    assert "_TGEMM_TILES" not in narrow  # only the tables a kernel uses
    wide = rewrite(linear_problem("torch.softmax(y, dim=-1)", n=300))
    assert wide.source is not None, wide.summary
    assert "configs=_TGEMM_TILES" in wide.source and "torch.softmax(" in wide.source


def test_module_settings_are_checked_at_call_time(tmp_path):
    init = "        self.act = nn.GELU(approximate='tanh')\n"
    text = linear_problem("self.act(y)", init=init)
    source = rewrite(text).source or ""
    assert "_tgemm_expect(self.act.approximate, 'tanh', 'self.act.approximate')" in source
    file = tmp_path / "candidate.py"
    file.write_text(source)
    new = load(source, str(file), "c").ModelNew(70, 45, 0.75)
    new.act.approximate = "none"
    with pytest.raises(ValueError, match=re.escape("self.act.approximate = 'tanh'")):
        new(torch.randn(3, 70), torch.randn(3, 45))


# -- what is refused ------------------------------------------------------------------------


def test_a_convolution_has_no_gemm_to_take():
    result = rewrite(bench("02_conv2d"))
    assert result.source is None and "no fp32 nn.Linear" in result.summary


def test_an_output_that_feeds_two_consumers_is_refused():
    result = rewrite(linear_problem("(torch.relu(y), torch.sigmoid(y))"))
    assert result.source is None
    assert "one kernel stores one value" in result.summary and "relu, sigmoid" in result.summary
    needed_outside = rewrite(linear_problem("torch.relu(y) + y.sum()"))
    assert needed_outside.source is None and "one kernel stores one value" in needed_outside.summary


def test_integer_and_float64_gemms_are_refused():
    forward = "        return torch.matmul(args[0], args[1])"
    ints = rewrite(
        gemm_problem(forward, "[torch.randint(0, 9, (5, 6)), torch.randint(0, 9, (6, 7))]")
    )
    assert ints.source is None and "int64 GEMM" in ints.summary
    doubles = rewrite(
        gemm_problem(forward, "[torch.randn(5, 6).double(), torch.randn(6, 7).double()]")
    )
    assert doubles.source is None and "float64 GEMM" in doubles.summary


def test_the_pass_refuses_a_cpu_program():
    result = TritonGemm().apply(program(linear_problem("torch.relu(y)"), device="cpu"))
    assert result.source is None and "run on CUDA" in result.summary


# -- the gate and the planner ---------------------------------------------------------------


def _profile(device: str, bound: str = "compute") -> Profile:
    flops = 2 * 4096 * 8192 * 8192
    gemm = OpStat(
        "aten::addmm",
        1,
        9.0,
        0.9,
        [[4096, 8192], [8192, 8192]],
        "torch.float32",
        flops,
        3 * 4096 * 8192 * 4,
        100.0,
        bound,
        93.0,
        8.4,
    )
    relu = OpStat(
        "aten::relu",
        1,
        1.0,
        0.1,
        [[4096, 8192]],
        "torch.float32",
        0,
        2 * 4096 * 8192 * 4,
        None,
        "memory",
        60.0,
        0.6,
    )
    roofline = Roofline(
        flops, 3 * 4096 * 8192 * 4, 5 * 4096 * 8192 * 4, 100.0, 8.4, 0.2, 8.4, bound, 93.0
    )
    ceilings = Ceilings(device, "test", 1, 4000.0, 51000.0, None, "2025-01-01T00:00:00Z")
    return Profile(
        "09_gemm_relu.py",
        device,
        "gpu",
        1,
        5,
        torch.__version__,
        10.0,
        10.0,
        10.0,
        1.0,
        [],
        [gemm, relu],
        roofline,
        ceilings,
    )


def test_the_gate_allows_the_skill_for_a_cuda_gemm_whatever_the_profile_says():
    """A compute-bound GEMM triggers it; a GEMM profiled as memory-bound (a ceiling measured
    under load) still gets it, saying so, since the pass verifies and times like any other;
    on the CPU it is never allowed."""
    source = (BENCH / "09_gemm_relu.py").read_text()
    allowed = gate(_profile("cuda").metrics(), source)
    assert SKILL in allowed.allowed_ids()
    why = next(c.why for c in allowed.allowed if c.skill.id == SKILL)
    assert any("device cuda" in reason for reason in why)
    assert any("bound compute meets compute" in reason for reason in why)
    assert SKILL not in gate(_profile("cpu").metrics(), source).allowed_ids()
    offered = gate(_profile("cuda", bound="memory").metrics(), source)
    why = next(c.why for c in offered.allowed if c.skill.id == SKILL)
    assert "offered whatever the profile says" in why[-1] and "linear at line" in why[1]


def test_the_planner_plans_the_pass_on_cuda_only():
    assert DEVICE_ONLY["triton-gemm"] == "cuda"
    skills = [SkillBrief(SKILL, "3xTF32 GEMM", offline_pass="triton-gemm")]
    for device, expected in (("cpu", []), ("cuda", ["triton-gemm"])):
        context = PlanningContext("ref", "ref", 1.0, device, allowed_skills=skills)
        assert [r.name for r in OfflinePlanner(None, device).rank(context)] == expected


# -- 3xTF32 itself, emulated ------------------------------------------------------------------


def _tf32(x: torch.Tensor) -> torch.Tensor:
    """Round fp32 to TF32's 10 fraction bits (to nearest), as the tensor cores see it."""
    return ((x.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


def test_emulated_3xtf32_stays_in_the_verifiers_band_and_plain_tf32_does_not():
    torch.manual_seed(0)
    a, b = torch.randn(128, 8192), torch.randn(8192, 96)
    gold, reference = a.double() @ b.double(), a @ b
    high_a, high_b = _tf32(a), _tf32(b)
    split = high_a @ high_b + (high_a @ _tf32(b - high_b) + _tf32(a - high_a) @ high_b)
    three = compare_output(split, reference, gold)
    one = compare_output(high_a @ high_b, reference, gold)
    assert three.float64_ok and three.error_ratio < 0.5, three
    assert not one.float64_ok and not one.strict_ok and one.error_ratio > 50, one


# -- on the GPU ------------------------------------------------------------------------------


def _time_ms(model: torch.nn.Module, inputs: list[torch.Tensor], repeat: int = 50) -> float:
    """Median time of one call; the warm-up absorbs compilation and autotuning."""
    with torch.no_grad():
        for _ in range(5):
            model(*inputs)
        torch.cuda.synchronize()
        times = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(*inputs)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


@pytest.mark.cuda
@CUDA
@pytest.mark.parametrize(
    "name",
    [
        "01_matmul",
        "09_gemm_relu",
        "10_gemm_gelu",
        "15_gemm_scale_shift",
        "19_mlp_block",
        "20_attention_block",
    ],
)
def test_cuda_kernel_against_fp32_eager_and_float64(name, tmp_path):
    text = (BENCH / f"{name}.py").read_text()
    reference = program(text)
    result = apply_general_first(TritonGemm(), reference)
    assert result.source is not None, result.summary
    file = tmp_path / "candidate.py"
    file.write_text(result.source)
    new = load(result.source, str(file), "c").ModelNew(*reference.init_inputs).cuda()
    new.load_state_dict(reference.module.state_dict())
    with torch.no_grad():
        ref, out = reference.module(*reference.inputs), new(*reference.inputs)
        wide = [x.double() for x in reference.inputs]
        gold = copy.deepcopy(reference.module).double()(*wide)
    found = compare_output(out, ref, gold)
    assert found.float64_ok, found
    eager, ours = _time_ms(reference.module, reference.inputs), _time_ms(new, reference.inputs)
    print(
        f"{name}: eager {eager:.3f} ms, triton-gemm {ours:.3f} ms ({eager / ours:.2f}x); "
        f"error {found.candidate_error:.2e} vs the reference's {found.reference_error:.2e}"
    )


@pytest.mark.cuda
@CUDA
def test_cuda_verifier_judges_the_rewrite_as_the_optimizer_hands_it_over():
    """The optimizer passes candidates as text with a `<candidate N>` label, no file: the
    kernel's @triton.jit must still find its source (agents.task.load_module)."""
    from agents.evaluate import EvalOptions, evaluate
    from agents.task import SourceFile
    from agents.verify.verdict import Verdict

    path = BENCH / "09_gemm_relu.py"
    result = rewrite(path.read_text())
    assert result.source is not None, result.summary
    options = EvalOptions(device="cuda", jail=False, timing_budget_s=1.0)
    judged = evaluate(
        SourceFile(path.read_text(), str(path)), SourceFile(result.source, "<candidate 1>"), options
    )
    assert judged.verdict == Verdict.CORRECT, judged.reasons
    assert judged.state_dict_compatible
