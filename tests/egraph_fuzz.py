"""A differential fuzzer for the equality-saturation pass.

Each program is a small random KernelBench-style module, written as source the way people
write them (modules in __init__, functional calls and methods in forward), from the op
vocabulary: linear, conv, reductions, max(...).values, pooling, elementwise maps, scalar
arithmetic, min/max/clamp, norms, softmax, transposes and dropout. The pass rewrites it; the
rewrite runs on fresh inputs with the same weights and random seed, and its output must pass
the verifier's float64 rule against the original (agents/verify/compare.py). Used by
tests/integration/test_egraph_fuzz.py (500 programs in CI) and bench/egraph_fuzz.py (10,000).
"""

from __future__ import annotations

import random
import time
import types
from dataclasses import dataclass

import torch

from agents.offline.egraph.saturate import EqualitySaturation
from agents.offline.passes.base import Program
from agents.verify import compare

ACTIVATIONS = ["torch.relu", "torch.sigmoid", "torch.tanh", "F.gelu", "F.silu", "torch.abs"]
REDUCERS = ["sum", "mean", "amax", "amin", "logsumexp"]


@dataclass
class Outcome:
    seed: int
    source: str
    simplified: bool
    changed_semantics: bool
    seconds: float
    detail: str = ""


def program_source(seed: int) -> str:
    """One random module, as source."""
    rng = random.Random(seed)
    image = rng.random() < 0.35
    init, body = ["        super(Model, self).__init__()"], []
    if image:
        channels = rng.choice([2, 4])
        inputs = f"torch.randn(2, {channels}, 6, 6)"
        dims = 4
    else:
        features = rng.choice([3, 8, 16])
        inputs = f"torch.randn(4, {features})"
        channels, dims = features, 2
    sizes = {1: channels}  # dim -> size where known (channels / features)
    steps = rng.randint(2, 7)
    for index in range(steps):
        pick = rng.random()
        if pick < 0.15 and dims == 2 and 1 in sizes:
            out = rng.choice([1, 3, 8])
            bias = rng.random() < 0.8
            init.append(f"        self.fc{index} = nn.Linear({sizes[1]}, {out}, bias={bias})")
            body.append(f"x = self.fc{index}(x)")
            sizes[1] = out
        elif pick < 0.25 and dims == 4 and 1 in sizes:
            out = rng.choice([2, 4])
            init.append(f"        self.conv{index} = nn.Conv2d({sizes[1]}, {out}, 3, padding=1)")
            body.append(f"x = self.conv{index}(x)")
            sizes[1] = out
        elif pick < 0.4:
            body.append(f"x = {rng.choice(ACTIVATIONS)}(x)")
        elif pick < 0.55:
            op = rng.choice(["+", "-", "*", "/"])
            value = rng.choice([0.0, 1.0, 2.0, 0.5, -1.5, 3.0])
            if op == "/" and value == 0.0:
                value = 2.0
            body.append(f"x = x {op} {value}")
        elif pick < 0.65:
            low = rng.choice([-1.0, 0.0, 0.5])
            high = low + rng.choice([0.0, 0.5, 2.0])
            kind = rng.random()
            if kind < 0.4:
                body.append(f"x = torch.clamp(x, min={low}, max={high})")
            elif kind < 0.7:
                body.append(f"x = torch.min(x, torch.tensor({low}, device=x.device))")
            else:
                body.append(f"x = torch.maximum(x, torch.full_like(x, {high}))")
        elif pick < 0.8:
            dim = rng.randrange(1, dims)
            keep = rng.random() < 0.7 or dims == 2
            op = rng.choice([*REDUCERS, "max_values"])
            if op == "max_values":
                body.append(f"x = torch.max(x, dim={dim}, keepdim={keep}).values")
            else:
                body.append(f"x = torch.{op}(x, dim={dim}, keepdim={keep})")
            if keep:
                sizes[dim] = 1
            else:
                dims -= 1
                sizes = {d if d < dim else d - 1: s for d, s in sizes.items() if d != dim}
            if dims < 2:
                break
        elif pick < 0.85:
            dim = rng.randrange(1, dims)
            body.append(f"x = torch.{rng.choice(['softmax', 'log_softmax'])}(x, dim={dim})")
        elif pick < 0.9 and dims == 4 and sizes.get(1) in (2, 4):
            init.append(f"        self.norm{index} = nn.GroupNorm(2, {sizes[1]})")
            body.append(f"x = self.norm{index}(x)")
        elif pick < 0.95:
            mean_dim = rng.randrange(1, dims)
            body.append(f"x = x - x.mean(dim={mean_dim}, keepdim=True)")
        else:
            init.append(f"        self.drop{index} = nn.Dropout({rng.choice([0.0, 0.25])})")
            body.append(f"x = self.drop{index}(x)")
    lines = [
        "import torch",
        "import torch.nn as nn",
        "import torch.nn.functional as F",
        "",
        "",
        "class Model(nn.Module):",
        "    def __init__(self):",
        *init,
        "",
        "    def forward(self, x):",
        *(f"        {line}" for line in body),
        "        return x",
        "",
        "",
        "def get_inputs():",
        f"    return [{inputs}]",
        "",
        "",
        "def get_init_inputs():",
        "    return []",
        "",
    ]
    return "\n".join(lines)


def _load(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def run_one(seed: int) -> Outcome:
    """Generate, rewrite, compare on fresh inputs; never raises for the program's sake."""
    source = program_source(seed)
    problem = _load(source, "fuzz_problem")
    torch.manual_seed(seed)
    model = problem.Model()
    inputs = problem.get_inputs()
    started = time.process_time()
    rewrite = EqualitySaturation().apply(Program(source, "Model", model, inputs, [], "cpu"))
    seconds = time.process_time() - started
    if rewrite.source is None:
        return Outcome(seed, source, False, False, seconds, rewrite.summary)
    candidate = _load(rewrite.source, "fuzz_candidate").ModelNew()
    candidate.load_state_dict(model.state_dict())
    fresh = [torch.randn_like(x) for x in inputs]
    with torch.no_grad():
        torch.manual_seed(1)
        expected = model(*[x.clone() for x in fresh])
        torch.manual_seed(1)
        got = candidate(*[x.clone() for x in fresh])
        torch.manual_seed(1)
        gold = model.double()(*[x.double() for x in fresh])
    problem_text = ""
    if got.shape != expected.shape or got.dtype != expected.dtype:
        problem_text = f"shape/dtype {tuple(got.shape)} {got.dtype} != {tuple(expected.shape)}"
    else:
        result = compare.compare_output(got, expected, gold)
        if not result.ok:
            problem_text = f"float64 rule failed: max |diff| {result.max_abs_diff:.3g}"
    return Outcome(seed, source, True, bool(problem_text), seconds, problem_text or rewrite.summary)
