"""`profile`: exact line attribution, op costs, ceilings, the sandboxed API and the command.

Ceilings are measured once per session into a temporary cache; every profile uses one thread
so that measurement serves them all.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch
from rich.console import Console

from agents.cli.profile import add_profile_parser, run_profile
from agents.profile import ceilings as ceilings_module
from agents.profile.api import ProfileError, profile_file
from agents.profile.ceilings import cache_path, get_ceilings
from agents.profile.costs import classify
from agents.profile.lines import LineRecorder, parse_range
from agents.profile.profiler import profile_model
from agents.profile.render import render_profile
from agents.profile.report import SCHEMA_VERSION, Ceilings, Profile
from agents.task import SourceFile, load_problem

ROOT = Path(__file__).resolve().parents[2]
THREADS = 1
M, K, N = 64, 96, 48

FOUR_STATEMENTS = f"""\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn({K}, {N}))

    def forward(self, x):
        y = torch.matmul(x, self.weight)
        y = y / 2
        s = torch.sum(y, dim=1)
        return torch.relu(s)


def get_inputs():
    return [torch.randn({M}, {K})]


def get_init_inputs():
    return []
"""

MODULES_AND_OPERATORS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


def triple(x):
    return x * 3


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.linear = nn.Linear(8 * 8 * 8, 32)
        self.ln = nn.LayerNorm(32)
        self.w = nn.Parameter(torch.randn(32, 16))

    def forward(self, x):
        x = self.conv(x)
        x = self.bn(x)
        x = self.linear(x.flatten(1))
        x = self.ln(x)
        x = F.softmax(x, dim=1)
        x = x @ self.w
        x = x * 2
        return triple(x)


def get_inputs():
    return [torch.randn(4, 3, 8, 8)]


def get_init_inputs():
    return []
"""


def line_of(text: str, statement: str) -> int:
    """1-based number of the line holding `statement`."""
    matches = [n for n, line in enumerate(text.splitlines(), 1) if line.strip() == statement]
    assert len(matches) == 1, statement
    return matches[0]


def profile_inline(path: Path, text: str, ceilings: Ceilings, repeat: int = 3) -> Profile:
    path.write_text(text)
    source = SourceFile.from_path(path)
    problem = load_problem(source)
    torch.manual_seed(0)
    model = problem.model_class(*problem.get_init_inputs())
    return profile_model(
        model,
        problem.get_inputs,
        source_path=source.label,
        device="cpu",
        ceilings=ceilings,
        repeat=repeat,
        threads=THREADS,
        source_text=source.text,
    )


@pytest.fixture(scope="session")
def cache_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache") / "kernel-agent"


@pytest.fixture(scope="session")
def cpu_ceilings(cache_root) -> Ceilings:
    torch.set_num_threads(THREADS)
    return get_ceilings("cpu", THREADS, cache_dir=cache_root)


@pytest.fixture(scope="module")
def four(tmp_path_factory, cpu_ceilings) -> tuple[Profile, str]:
    path = tmp_path_factory.mktemp("four") / "four_statements.py"
    return profile_inline(path, FOUR_STATEMENTS, cpu_ceilings), FOUR_STATEMENTS


def ops_on(profile: Profile, line: int) -> set[str]:
    return {op.name for stat in profile.lines if stat.line == line for op in stat.ops}


def test_each_statement_lands_on_its_own_line(four):
    profile, text = four
    expected = {
        "y = torch.matmul(x, self.weight)": "aten::mm",
        "y = y / 2": "aten::div",
        "s = torch.sum(y, dim=1)": "aten::sum",
        "return torch.relu(s)": "aten::relu",
    }
    assert profile.attributed_share >= 0.95
    assert {stat.line for stat in profile.lines} == {line_of(text, s) for s in expected}
    for statement, op in expected.items():
        number = line_of(text, statement)
        assert op in ops_on(profile, number)
        stat = next(stat for stat in profile.lines if stat.line == number)
        assert stat.source == statement
        assert stat.function == "forward"
        assert stat.time_ms > 0
    others = set(expected.values()) - {"aten::mm"}
    assert not others & ops_on(profile, line_of(text, "y = torch.matmul(x, self.weight)"))
    times = [stat.time_ms for stat in profile.lines]
    assert times == sorted(times, reverse=True)


def test_matmul_line_counts_2mnk_flops_and_its_minimum_bytes(four):
    profile, text = four
    stats = {stat.line: stat for stat in profile.lines}
    matmul = stats[line_of(text, "y = torch.matmul(x, self.weight)")]
    assert matmul.flops == 2 * M * N * K
    assert matmul.bytes == 4 * (M * K + K * N + M * N)
    assert matmul.intensity == pytest.approx(matmul.flops / matmul.bytes, rel=1e-3)
    divide = stats[line_of(text, "y = y / 2")]
    assert divide.flops == M * N
    assert divide.bytes == 4 * 2 * M * N  # read once, written once
    total = stats[line_of(text, "s = torch.sum(y, dim=1)")]
    assert total.flops == M * N
    assert total.bytes == 4 * (M * N + M)
    relu = stats[line_of(text, "return torch.relu(s)")]
    assert relu.intensity == pytest.approx(0.125, rel=1e-3)
    assert profile.roofline.flops == sum(stat.flops for stat in profile.lines)
    assert profile.roofline.bytes == 4 * (M * K + K * N + M)  # inputs, weight, output
    assert profile.roofline.unfused_bytes > profile.roofline.bytes


def test_verdicts_and_peaks_are_consistent(four):
    profile, _ = four
    ceil = profile.ceilings
    for stat in profile.lines:
        assert stat.bound in ("memory", "compute", "overhead")
        assert 0 <= stat.pct_of_peak <= 100
        compute = stat.flops / (ceil.matmul_gflops * 1e6)
        memory = stat.bytes / (ceil.memory_gbps * 1e6)
        assert stat.roofline_ms == pytest.approx(max(compute, memory), rel=1e-3, abs=1e-6)
    assert classify(1.0, compute=0.9, memory=0.1, kernel_calls=1, device="cpu").bound == "compute"
    assert classify(1.0, compute=0.1, memory=0.5, kernel_calls=1, device="cpu").bound == "memory"
    tiny = classify(0.01, compute=0.0, memory=0.0001, kernel_calls=1, device="cpu")
    assert tiny.bound == "overhead"
    assert tiny.pct_of_peak == pytest.approx(1.0)


def test_module_calls_and_operators_are_attributed_to_the_calling_line(tmp_path, cpu_ceilings):
    text = MODULES_AND_OPERATORS
    profile = profile_inline(tmp_path / "modules.py", text, cpu_ceilings, repeat=2)
    expected = {
        "x = self.conv(x)": "aten::convolution",
        "x = self.bn(x)": "aten::native_batch_norm",
        "x = self.linear(x.flatten(1))": "aten::addmm",
        "x = self.ln(x)": "aten::native_layer_norm",
        "x = F.softmax(x, dim=1)": "aten::_softmax",
        "x = x @ self.w": "aten::mm",
        "x = x * 2": "aten::mul",
        "return x * 3": "aten::mul",  # inside the helper: the innermost line of the file
    }
    for statement, op in expected.items():
        assert op in ops_on(profile, line_of(text, statement)), statement
    assert not ops_on(profile, line_of(text, "return triple(x)"))
    conv = next(s for s in profile.lines if s.line == line_of(text, "x = self.conv(x)"))
    assert conv.flops > 0
    assert profile.attributed_share >= 0.95


def test_nested_torch_calls_open_only_the_outermost_range(tmp_path):
    path = tmp_path / "nested.py"
    path.write_text(
        "import torch.nn.functional as F\n\ndef run(x):\n    return F.layer_norm(x, (8,))\n"
    )
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    cpu = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=cpu) as prof, LineRecorder(str(path)):
        namespace["run"](torch.randn(4, 8))
    ranges = [e for e in prof.events() if parse_range(e.name)]
    assert {parse_range(e.name).line for e in ranges} == {4}
    for event in ranges:
        parent = event.cpu_parent
        while parent is not None:
            assert parse_range(parent.name) is None
            parent = parent.cpu_parent


def test_profile_json_round_trips_exactly(four):
    profile, _ = four
    data = json.loads(json.dumps(profile.to_json()))
    assert data["schema_version"] == SCHEMA_VERSION == 1
    assert Profile.from_json(data) == profile
    assert Profile.from_json(data).to_json() == data
    with pytest.raises(ValueError, match="schema version"):
        Profile.from_json({**data, "schema_version": 99})


def test_table_shows_hot_lines_and_their_ops(four):
    profile, _ = four
    console = Console(record=True, width=160)
    render_profile(profile, console)
    shown = console.export_text()
    assert "y = torch.matmul(x, self.weight)" in shown
    assert "aten::mm 64x96 96x48" in shown
    assert "attributed to source lines" in shown


def test_ceilings_are_measured_on_this_cpu_and_cached(cpu_ceilings, cache_root):
    assert cpu_ceilings.device == "cpu"
    assert cpu_ceilings.threads == THREADS
    assert cpu_ceilings.name
    assert cpu_ceilings.memory_gbps > 0.1
    assert cpu_ceilings.matmul_gflops > 0.1
    assert cpu_ceilings.bf16_gflops is None
    path = cache_path("cpu", THREADS, cache_root)
    assert path.name.endswith(f"-{THREADS}.json")
    assert path.is_file()


def test_a_cached_ceiling_is_not_measured_again_until_refresh(tmp_path, monkeypatch):
    measured = []

    def fake_measure(device: str, threads: int) -> Ceilings:
        measured.append(device)
        return Ceilings(device, "test cpu", threads, 10.0, 100.0, None, f"run {len(measured)}")

    monkeypatch.setattr(ceilings_module, "measure_ceilings", fake_measure)
    first = get_ceilings("cpu", 3, cache_dir=tmp_path)
    mtime = cache_path("cpu", 3, tmp_path).stat().st_mtime_ns
    assert get_ceilings("cpu", 3, cache_dir=tmp_path) == first
    assert len(measured) == 1
    assert cache_path("cpu", 3, tmp_path).stat().st_mtime_ns == mtime
    refreshed = get_ceilings("cpu", 3, refresh=True, cache_dir=tmp_path)
    assert len(measured) == 2
    assert refreshed.measured_at == "run 2"
    assert get_ceilings("cpu", 3, cache_dir=tmp_path) == refreshed


@pytest.mark.parametrize(
    "path", [ROOT / "tests/problems/linear_relu.py", ROOT / "examples/gemm_divide_sum_scale.py"]
)
def test_profile_file_points_at_the_forward_statements(path, cache_root, cpu_ceilings):
    profile = profile_file(
        SourceFile.from_path(path), threads=THREADS, repeat=3, cache_dir=cache_root
    )
    text = path.read_text().splitlines()
    forward = next(n for n, line in enumerate(text, 1) if "def forward" in line)
    assert profile.attributed_share >= 0.95
    assert profile.lines
    for stat in profile.lines:
        assert stat.line > forward
        assert stat.source == text[stat.line - 1].strip()
        assert stat.file == str(path)
    assert profile.ceilings == cpu_ceilings
    assert profile.total_ms > 0
    if path.name == "gemm_divide_sum_scale.py":
        hot = {stat.source: stat for stat in profile.lines}
        assert hot["x = torch.matmul(x, self.weight.T)"].flops == 2 * 128 * 512 * 1024
        assert {stat.line for stat in profile.lines} == set(range(forward + 1, forward + 5))


def test_malformed_file_raises_one_line_profile_error(tmp_path, cache_root):
    broken = SourceFile(text="import torch\nclass Model:\n    pass\n", path=str(tmp_path / "b.py"))
    with pytest.raises(ProfileError) as missing:
        profile_file(broken, threads=THREADS, cache_dir=cache_root)
    assert "get_inputs" in str(missing.value)
    syntax = SourceFile(text="def forward(:\n", path=str(tmp_path / "s.py"))
    with pytest.raises(ProfileError) as invalid:
        profile_file(syntax, threads=THREADS, cache_dir=cache_root)
    for error in (missing.value, invalid.value):
        assert "\n" not in str(error)


def test_a_failing_forward_names_its_line(tmp_path, cache_root, cpu_ceilings):
    text = FOUR_STATEMENTS.replace("y = y / 2", "y = y @ y")
    path = tmp_path / "fails.py"
    path.write_text(text)
    with pytest.raises(ProfileError) as failed:
        profile_file(SourceFile.from_path(path), threads=THREADS, cache_dir=cache_root)
    message = str(failed.value)
    assert "\n" not in message
    assert f"{path}:{line_of(text, 'y = y @ y')}: RuntimeError" in message


def test_profile_command_prints_json_and_writes_a_plot(
    tmp_path, cache_root, cpu_ceilings, capsys, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_root.parent))  # reuse the session's ceilings
    parser = argparse.ArgumentParser(prog="kernel-agent")
    add_profile_parser(parser.add_subparsers(dest="command"))
    plot = tmp_path / "roofline.png"
    problem = ROOT / "examples/gemm_divide_sum_scale.py"
    args = parser.parse_args(
        ["profile", str(problem), "--json", "--threads", "1", "--repeat", "2", "--plot", str(plot)]
    )
    assert run_profile(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == 1
    assert data["ceilings"]["measured_at"] == cpu_ceilings.measured_at
    # The GEMM's line carries the work; which line measured longest is timing, and a loaded
    # machine once put the division first.
    heaviest = max(data["lines"], key=lambda line: line["flops"])
    assert heaviest["source"] == "x = torch.matmul(x, self.weight.T)"
    assert heaviest["flops"] == 2 * 128 * 512 * 1024 and heaviest["time_ms"] > 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ProfileError):
        run_profile(parser.parse_args(["profile", str(tmp_path / "missing.py")]))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_profile_attributes_device_time_to_lines(tmp_path, cache_root):
    path = tmp_path / "four_cuda.py"
    path.write_text(FOUR_STATEMENTS)
    profile = profile_file(
        SourceFile.from_path(path), device="cuda", repeat=3, cache_dir=cache_root, use_jail=False
    )
    assert profile.device == "cuda"
    assert profile.ceilings.bf16_gflops and profile.ceilings.bf16_gflops > 0
    assert profile.ceilings.tf32_gflops and profile.ceilings.tf32_gflops > 0
    assert profile.attributed_share >= 0.95
    matmul = next(s for s in profile.lines if s.source == "y = torch.matmul(x, self.weight)")
    assert matmul.flops == 2 * M * N * K
    assert matmul.time_ms > 0
