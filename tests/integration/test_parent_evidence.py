"""The verdict rests on what the parent computes, never on what the accused reports about
itself, and no worker can predict a seed it has not been sent (issue 32).

The arguments after a call are compared by the parent on their bytes (agents/verify/arguments.py),
so a worker that forges its report of them changes nothing; every trial, reload trial and
perturbation seed comes from the system's randomness, so the base seed a candidate is built
under tells it nothing of its inputs.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
import torch

from agents.sandbox.peer import Peer
from agents.task import SourceFile
from agents.verify import values
from agents.verify.arguments import changed_arguments
from agents.verify.judge import SEED_LIMIT, Judge, JudgeRequest
from agents.verify.verdict import Verdict
from tests.conftest import ADVERSARIAL, run_eval

HONEST_REQUEST = Peer.request


def _fetched(args: list[Any]) -> values.Unpacked:
    """What the parent holds after a `fetch` with `args`: the value as it crossed the wire."""
    tree, specs, payload = values.pack({"out": torch.zeros(2), "args": args})
    return values.unpack(tree, specs, payload)


def test_the_same_arguments_pass():
    x = torch.randn(4, 5)
    x[1, 2] = math.nan
    assert changed_arguments(_fetched([x.clone(), 3, 0.5]), _fetched([x, 3, 0.5])) is None


def test_negative_zero_is_the_same_number():
    assert (
        changed_arguments(_fetched([torch.tensor([-0.0])]), _fetched([torch.tensor([0.0])])) is None
    )


def test_one_element_written_is_refused():
    x = torch.randn(64, 64)
    written = x.clone()
    written[17, 3] += 1e-6
    reason = changed_arguments(_fetched([torch.ones(3), written]), _fetched([torch.ones(3), x]))
    assert reason is not None and "input 1" in reason


@pytest.mark.parametrize(
    "mine",
    [
        [torch.zeros(4, 4)],  # a leaf missing
        [torch.zeros(4, 4), torch.zeros(16)],  # reshaped in place
        [torch.zeros(4, 4), torch.zeros(4, 4, dtype=torch.float64)],
        [torch.zeros(4, 4), 0.0],  # a tensor become a number
    ],
)
def test_another_structure_is_refused(mine):
    assert changed_arguments(_fetched(mine), _fetched([torch.zeros(4, 4), torch.zeros(4, 4)]))


def test_an_integer_argument_changed_is_refused():
    assert changed_arguments(_fetched([torch.arange(5) + 1]), _fetched([torch.arange(5)]))


def test_an_in_place_writer_is_refused_even_when_its_worker_forges_the_checksum():
    """The worker answers "what are your arguments now?" with a pristine copy's checksum;
    the parent no longer asks it that, and reads the bytes itself."""
    result = run_eval(
        "softmax_rows.py",
        ADVERSARIAL / "forged_argument_checksum.py",
        static_check=False,
        measure=False,
    )
    assert result.verdict is Verdict.REJECTED, result.reasons
    assert "changed its input" in " ".join(result.reasons)


LARGE_SOFTMAX = """
import torch
import torch.nn as nn

ROWS, COLS = 512, 512  # 262,144 elements: above the sample, so compared at a sample


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
"""

IN_PLACE = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        x.sub_(x.amax(dim=-1, keepdim=True)).exp_()
        return x.div_(x.sum(dim=-1, keepdim=True))
"""

ON_A_COPY = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)
"""


@pytest.mark.parametrize("code, refused", [(IN_PLACE, True), (ON_A_COPY, False)])
def test_large_arguments_are_compared_at_a_sample_drawn_after_the_call(tmp_path, code, refused):
    """Inputs above the sample size cross the pipe as a sample at indices the parent draws
    per trial and sends only after the call: an in-place kernel is still refused, one that
    leaves its input alone still passes."""
    problem = tmp_path / "large_softmax.py"
    problem.write_text(LARGE_SOFTMAX)
    candidate = SourceFile(code, str(tmp_path / "candidate.py"))
    result = run_eval(problem, candidate, static_check=False, measure=False)
    if refused:
        assert result.verdict is Verdict.REJECTED, result.reasons
        assert "changed its input" in " ".join(result.reasons)
    else:
        assert result.verdict is Verdict.CORRECT, result.reasons


def test_a_forged_state_dict_claim_does_not_skip_the_reload_check():
    """The worker says ModelNew refuses Model's state_dict; the parent tries it, it loads,
    and the reload check runs and finds the folded weights stale."""
    result = run_eval(
        "linear_relu.py",
        ADVERSARIAL / "forged_state_dict_claim.py",
        static_check=False,
        measure=False,
    )
    assert result.verdict is Verdict.INCORRECT, result.reasons
    assert result.reload_check == "failed"
    assert result.state_dict_compatible is True


def _seeds_sent(monkeypatch, base: int) -> dict[str, list[int]]:
    """Every seed the parent sends in one evaluation without timing, by worker and request."""
    sent: dict[str, list[int]] = {}
    honest = HONEST_REQUEST

    def recording(self, op, timeout_s, **fields):
        if "seed" in fields:
            role = "candidate" if "candidate" in self.label else "reference"
            sent.setdefault(f"{role}:{op}", []).append(int(fields["seed"]))
        return honest(self, op, timeout_s, **fields)

    monkeypatch.setattr(Peer, "request", recording)
    result = run_eval("linear_relu.py", "linear_relu_honest.py", seed=base, measure=False)
    assert result.verdict is Verdict.CORRECT, result.reasons
    assert result.seed == base
    return sent


def test_no_seed_can_be_predicted_from_the_base_seed_or_another_verdict(monkeypatch):
    base = 4242
    first = _seeds_sent(monkeypatch, base)
    second = _seeds_sent(monkeypatch, base)
    for sent in (first, second):
        # The base seed goes out only with the builds (the init), to both workers.
        assert sent["candidate:build"] == [base]
        assert sent["reference:load"] == [base]
        trials = sent["candidate:prepare"]
        assert len(trials) == 5 + 2  # five trials and two after the reload, one seed each
        assert sent["reference:prepare"] == trials  # the same inputs on both sides
        assert len(set(trials)) == len(trials)
        drawn = trials + sent["reference:perturb"]
        assert all(0 < seed < SEED_LIMIT for seed in drawn)
        # Not base plus an offset, as the trials (base + 1 + t, base + 2000 + t) and the
        # perturbation (base + 1000) used to be: nothing derived from what the build sent.
        assert not [seed for seed in drawn if abs(seed - base) < 10_000]
        assert "candidate:perturb" not in sent  # the new state goes to it as data
    # The same candidate, the same base seed: two verdicts, other inputs every time.
    assert not set(first["candidate:prepare"]) & set(second["candidate:prepare"])
    assert first["reference:perturb"] != second["reference:perturb"]


def test_the_judge_draws_from_the_system_not_from_a_twister():
    """A Mersenne Twister's later draws follow from about 624 of its outputs, and a worker
    sees every seed it is sent: the judge's generator keeps no state to learn."""
    source = SourceFile(text="", path="/virtual/x.py")
    judge = Judge(JudgeRequest(source, source), None, None, print, lambda: True, lambda: None)
    assert isinstance(judge.rng, random.SystemRandom)
