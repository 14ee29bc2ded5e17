"""A second differential fuzzer for the equality-saturation pass, over the vocabulary it took
over from the deleted pattern passes (issue 20): no-op copies, casts, views and dropout,
permutations that cancel, addmm, scales and shifts around linear and conv layers (floats read
from self, per-channel parameters and buffers), in-place activations, BatchNorm in training
mode and tuple outputs. Each rewrite runs on fresh inputs with the same weights and random
seed; every output must pass the verifier's float64 rule against the original's, and the
buffers after the call (BatchNorm's running statistics) must be the original's.
"""

from __future__ import annotations

import copy
import random
import time

import torch

from agents.offline.egraph.saturate import EqualitySaturation
from agents.offline.fx.tracing import apply_general_first
from agents.offline.passes.base import Program
from agents.verify import compare
from tests.egraph_fuzz import Outcome, _load

IDENTITIES = [
    "x = x.clone()",
    "x = x.contiguous()",
    "x = x * 1",
    "x = 1 * x",
    "x = x + 0",
    "x = x / 1",
    "x = x ** 1",
    "x = x.float()",
    "x = x.to(torch.float32)",
    "x = F.dropout(x, p=0.0)",
    "x = F.dropout(x, 0.3, training=False)",
]
IMAGE_PERMUTES = [
    "x = x.permute(0, 2, 3, 1).permute(0, 3, 1, 2)",
    "x = x.transpose(2, 3).transpose(3, 2)",
    "x = x.mT.mT",
    "x = torch.permute(x, (0, 1, 3, 2)).transpose(-1, -2)",
]
FLAT_PERMUTES = ["x = x.t().t()", "x = x.T.contiguous().T", "x = x.permute(1, 0).permute(1, 0)"]
IN_PLACE = [
    "y = x * 2.0\n        y.relu_()\n        x = y + 1.0",
    "y = x + 0\n        y.add_(1)\n        x = y * 1",
    "x = F.relu(x * 1, inplace=True)",
]


def program_source(seed: int) -> str:
    """One random module, as source, in the idioms of KernelBench files."""
    rng = random.Random(seed)
    image = rng.random() < 0.5
    init, body, extra = ["        super(Model, self).__init__()"], [], []
    if image:
        c, h = rng.choice([2, 4]), rng.choice([8, 12])
        inputs = f"torch.randn(2, {c}, {h}, {h})"
        view = "x = x.view(x.size(0), x.size(1), x.shape[2], x.size(-1))"
    else:
        c, h = rng.choice([3, 8]), 0
        inputs = f"torch.randn(4, {c})"
        view = "x = x.view(x.size(0), -1)"
    for i in range(rng.randint(2, 8)):
        p = rng.random()
        if p < 0.25:
            body.append(rng.choice([*IDENTITIES, view]))
        elif p < 0.3:
            init.append(f"        self.id{i} = nn.Identity()")
            body.append(f"x = self.id{i}(x)")
        elif p < 0.35:
            init.append(f"        self.dz{i} = nn.{rng.choice(['Dropout', 'AlphaDropout'])}(0.0)")
            body.append(f"x = self.dz{i}(x)")
        elif p < 0.42:
            body.append(rng.choice(IMAGE_PERMUTES if image else FLAT_PERMUTES))
        elif p < 0.55 and image:
            c = _conv(rng, init, body, i, c)
        elif p < 0.55:
            c = _linear(rng, init, body, i, c)
        elif p < 0.6 and not image:
            out = rng.choice([3, 8])
            init.append(f"        self.w{i} = nn.Parameter(torch.randn({c}, {out}))")
            lead = rng.choice(["", "1, ", "4, "])
            init.append(f"        self.b{i} = nn.Parameter(torch.randn({lead}{out}))")
            scales = rng.choice(["", ", beta=0.5", ", alpha=2.0", ", beta=2.0, alpha=-1.0"])
            body.append(f"x = torch.addmm(self.b{i}, x, self.w{i}{scales})")
            c = out
        elif p < 0.68:
            d = rng.choice([-1, 1])
            body.append(
                rng.choice(
                    [
                        f"x = x.sum({d}, keepdim=True) + x",
                        f"x = (x * 3.0 + 2.0).mean({d}, keepdim=True) * x",
                        f"x = x - (0.5 - x).sum({d}, keepdim=True)",
                    ]
                )
            )
        elif p < 0.75:
            body.append(rng.choice(IN_PLACE))
            if rng.random() < 0.5:
                init.append(f"        self.act{i} = nn.ReLU(inplace=True)")
                body.append(f"x = self.act{i}(x * 0.5)")
        elif p < 0.82:
            init.append(f"        self.bn{i} = nn.BatchNorm{'2' if image else '1'}d({c})")
            body.append(f"x = self.bn{i}(x.clone() * 1.0)")
        elif p < 0.88 and image and h > 2 and h % 2 == 0:
            body.append(rng.choice(["x = F.max_pool2d(x + 0, 2)", "x = F.avg_pool2d(x, 2)"]))
            h //= 2
        elif p < 0.94:
            body.append(f"x = torch.{rng.choice(['relu', 'sigmoid', 'tanh'])}(x)")
        else:
            extra.append(rng.choice(["x.sum() * 1", "x.clone()"]))
    result = "x" if not extra else "(x, " + ", ".join(extra) + ")"
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
        f"        return {result}",
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


def _conv(rng: random.Random, init: list[str], body: list[str], i: int, c: int) -> int:
    out = rng.choice([2, 4])
    bias = rng.random() < 0.7
    init.append(f"        self.conv{i} = nn.Conv2d({c}, {out}, 3, padding=1, bias={bias})")
    body.append(f"x = self.conv{i}(x)")
    q = rng.random()
    if q < 0.3:
        init.append(f"        self.cb{i} = nn.Parameter(torch.randn({out}, 1, 1))")
        body.append(f"x = x {rng.choice(['+', '-'])} self.cb{i}")
    elif q < 0.5:
        init.append(f"        self.register_buffer('cs{i}', torch.rand(1, {out}, 1, 1) + 0.5)")
        body.append(rng.choice([f"x = x * self.cs{i}", f"x = self.cs{i} * x"]))
    elif q < 0.7:
        init.append(f"        self.s{i} = {rng.choice([0.5, -2.0, 1.5])}")
        body.append(f"x = x * self.s{i} + self.s{i}")
    else:
        body.append(rng.choice(["x = 2.0 - x", "x = 0.5 * x + 1.0", "x = -x", "x = (x - 1) / 4"]))
    return out


def _linear(rng: random.Random, init: list[str], body: list[str], i: int, c: int) -> int:
    out = rng.choice([3, 8, 16])
    bias = rng.random() < 0.7
    init.append(f"        self.fc{i} = nn.Linear({c}, {out}, bias={bias})")
    body.append(f"x = self.fc{i}(x)")
    q = rng.random()
    if q < 0.3:
        lead = rng.choice(["", "1, "])
        init.append(f"        self.g{i} = nn.Parameter(torch.randn({lead}{out}))")
        body.append(rng.choice([f"x = x * self.g{i}", f"x = x + self.g{i}", f"x = self.g{i} - x"]))
    elif q < 0.5:
        init.append(f"        self.s{i} = {rng.choice([0.5, -2.0])}")
        body.append(f"x = x * self.s{i} - self.s{i}")
    else:
        body.append(rng.choice(["x = 2.0 - x", "x = 3.0 * x + 1.0", "x = -x"]))
    return out


def _leaves(value: object) -> list[torch.Tensor]:
    return list(value) if isinstance(value, tuple | list) else [value]  # type: ignore[list-item]


def run_one(seed: int) -> Outcome:
    """Generate, rewrite, compare outputs and buffers on fresh inputs; never raises for the
    program's sake."""
    source = program_source(seed)
    torch.manual_seed(seed)
    model = _load(source, "fuzz_noops_problem").Model()
    inputs = _load(source, "fuzz_noops_inputs").get_inputs()
    gold_model = copy.deepcopy(model).double()
    started = time.process_time()
    program = Program(source, "Model", copy.deepcopy(model), inputs, [], "cpu")
    rewrite = apply_general_first(EqualitySaturation(), program)
    seconds = time.process_time() - started
    if rewrite.source is None:
        return Outcome(seed, source, False, False, seconds, rewrite.summary)
    candidate = _load(rewrite.source, "fuzz_noops_candidate").ModelNew()
    candidate.load_state_dict(model.state_dict())
    fresh = [torch.randn_like(x) for x in inputs]
    with torch.no_grad():
        torch.manual_seed(1)
        expected = _leaves(model(*[x.clone() for x in fresh]))
        torch.manual_seed(1)
        got = _leaves(candidate(*[x.clone() for x in fresh]))
        torch.manual_seed(1)
        try:  # a program that casts to float32 itself has no float64 run: strict rule only
            gold: list = _leaves(gold_model(*[x.double() for x in fresh]))
        except RuntimeError:
            gold = [None] * len(expected)
    problem = ""
    if len(got) != len(expected):
        problem = f"{len(got)} outputs, the original returns {len(expected)}"
    for index, (a, b, g) in enumerate(zip(got, expected, gold, strict=False)):
        if problem:
            break
        if a.shape != b.shape or a.dtype != b.dtype:
            problem = f"output {index}: {tuple(a.shape)} {a.dtype} != {tuple(b.shape)} {b.dtype}"
        elif not (result := compare.compare_output(a, b, g)).ok:
            problem = f"output {index}: float64 rule failed, max |diff| {result.max_abs_diff:.3g}"
    after, before = candidate.state_dict(), model.state_dict()
    for name, value in before.items():
        if not problem and not torch.allclose(after[name].double(), value.double()):
            problem = f"buffer {name} differs after the call"
    return Outcome(seed, source, True, bool(problem), seconds, problem or rewrite.summary)
