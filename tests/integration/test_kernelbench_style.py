"""KernelBench's own idioms through `eval` and `profile`, on tests/kernelbench_style/: a folder
laid out like a KernelBench checkout (level1..3), with problems written in its conventions
(`super(Model, self).__init__()`, module-level sizes, `get_init_inputs()` returning `[]` or
constants, dropout left in training mode, buffers, tensors built in forward, non-tensor
forward arguments, tuple outputs, keyword defaults, submodules).

Every test runs the CLI as a subprocess. The optimizer's runs over the same folder are in
test_kernelbench_style_optimize.py (slow)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agents.bench.suite import discover, problem_name
from tests.conftest import ROOT, TESTS, requires_jail

KERNEL_AGENT = [sys.executable, "-m", "agents"]
CHECKOUT = TESTS / "kernelbench_style"
PROBLEMS = sorted((CHECKOUT / "KernelBench").glob("level*/*.py"))
FAST = ["--threads", "1", "--timing-budget", "0.1"]


def kernel_agent(*args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    """`kernel-agent ARGS` as a subprocess from the repository root, output captured."""
    return subprocess.run(
        [*KERNEL_AGENT, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def copy_as_candidate(problem: Path, folder: Path) -> Path:
    """The problem itself as a candidate: every `Model` renamed `ModelNew` (the static check
    refuses a candidate that names `Model`), `super(ModelNew, self)` included."""
    candidate = folder / f"{problem.stem}_new.py"
    candidate.write_text(re.sub(r"\bModel\b", "ModelNew", problem.read_text()))
    return candidate


def _id(path: Path) -> str:
    return problem_name(path)


def test_the_folder_is_read_as_a_kernelbench_checkout():
    """`bench` finds all three levels under KernelBench/, in KernelBench's numeric order, and
    the problems cover the idioms this suite exists for."""
    found = discover(CHECKOUT, [1, 2, 3])
    assert [p.resolve() for p in found] == sorted(
        (p.resolve() for p in PROBLEMS),
        key=lambda p: (p.parent.name, int(p.name.split("_")[0])),
    )
    assert len(found) >= 20
    levels = {p.parent.name for p in found}
    assert levels == {"level1", "level2", "level3"}
    assert problem_name(discover(CHECKOUT, [3])[0]) == "level3/1_Small_MLP"
    texts = [p.read_text() for p in PROBLEMS]
    assert all("super(Model, self).__init__()" in text for text in texts)
    assert all(re.search(r"^\w+ = \d+$", text, re.M) for text in texts)  # module-level sizes
    empty_init = [p for p in PROBLEMS if _returns_empty_list(p, "get_init_inputs")]
    assert 3 <= len(empty_init) < len(PROBLEMS)  # some `[]`, the others constants
    joined = "\n".join(texts)
    for idiom in (
        "nn.Dropout(",
        "register_buffer(",
        "torch.tensor(",
        "nn.Sequential(",
        "class BasicBlock(nn.Module)",
        "beta: float = 2.0",
        "nn.BatchNorm1d(",
        "def forward(self, A: torch.Tensor, s: float)",
        "return y, y + residual",
    ):
        assert idiom in joined, idiom


def _returns_empty_list(path: Path, function: str) -> bool:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            returns = [n for n in ast.walk(node) if isinstance(n, ast.Return)]
            return any(isinstance(r.value, ast.List) and not r.value.elts for r in returns)
    return False


@requires_jail
@pytest.mark.parametrize(
    ("index", "problem"),
    [pytest.param(i, p, id=_id(p)) for i, p in enumerate(PROBLEMS)],
)
def test_eval_judges_a_copy_of_each_problem_correct(index, problem, tmp_path):
    """Each problem against a copy of itself: correct, in the readable summary or in --json
    (alternately, so both outputs meet every level's idioms within the time budget)."""
    candidate = copy_as_candidate(problem, tmp_path)
    as_json = index % 2 == 1
    done = kernel_agent("eval", str(problem), str(candidate), *FAST, *(["--json"] * as_json))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    if as_json:
        result = json.loads(done.stdout)
        assert result["verdict"] == "correct" and result["strict_allclose"] is True
        assert result["reference_ms"] > 0 and result["candidate_ms"] > 0
        assert result["state_dict_compatible"] is True
    else:
        assert done.stdout.startswith("verdict: correct\n"), done.stdout
        assert "strict allclose pass" in done.stdout and "timing: reference" in done.stdout


def first_of_each_level(problems: list[Path]) -> list:
    """`make test`'s shard of a per-problem test: the first problem of each level (as the
    checkout lists them) runs there; the others are marked long and run in `make test-all`."""
    firsts: dict[str, Path] = {}
    for problem in problems:
        firsts.setdefault(problem.parent.name, problem)
    kept = set(firsts.values())
    return [
        pytest.param(p, id=_id(p), marks=() if p in kept else pytest.mark.long) for p in problems
    ]


@requires_jail
@pytest.mark.parametrize("problem", first_of_each_level(PROBLEMS))
def test_profile_reads_each_problem(problem):
    """The profiler builds each Model with its init inputs and attributes time to the
    problem's own forward lines."""
    done = kernel_agent("profile", str(problem), "--json", "--threads", "1", "--repeat", "2")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    profile = json.loads(done.stdout)
    assert profile["total_ms"] > 0 and profile["ops"]
    ours = [line for line in profile["lines"] if Path(line["file"]) == problem.resolve()]
    assert ours and all(line["function"] == "forward" for line in ours), profile["lines"]


@requires_jail
def test_a_generated_reference_keeps_super_model_self_working(tmp_path):
    """Issue 19: a problem made from another (the compiled reference as the "reference" of a
    head-to-head) names its reference class with `__kernel_agent_reference__`, leaving `Model`
    bound, so the reference's own `super(Model, self).__init__()` builds the right class.
    Rebinding `Model = ModelNew` instead made it `TypeError: Model.__init__() missing 7
    required positional arguments`."""
    problem = CHECKOUT / "KernelBench" / "level2" / "3_ConvTranspose2d_Add_HardSwish.py"
    reference = tmp_path / "wrapped_reference.py"
    reference.write_text(
        problem.read_text()
        + "\n\nclass ModelNew(Model):\n"
        + "    def __init__(self, *args, **kwargs):\n"
        + "        super().__init__(*args, **kwargs)\n"
        + "\n\n__kernel_agent_reference__ = 'ModelNew'\n"
    )
    candidate = copy_as_candidate(problem, tmp_path)
    done = kernel_agent("eval", str(reference), str(candidate), *FAST, "--json")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert json.loads(done.stdout)["verdict"] == "correct"
    # A marker naming a class the file lacks is the problem's error, in one line.
    reference.write_text(problem.read_text() + "\n__kernel_agent_reference__ = 'Missing'\n")
    done = kernel_agent("eval", str(reference), str(candidate), *FAST)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "no `class Missing` at module level" in done.stderr
