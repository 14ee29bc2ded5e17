"""The first trial's float64 anchor is sent at a sample of each large output's elements.

The sample only describes: nothing passes on it. These tests hold the judge's own decision
path (`judge_leaf`, with the worker's own `sample_leaves`) to two promises:
- its verdict on an output is the verdict of the full check, on every output of the bench
  suite, honest or off by a little or a lot;
- a planted error is caught: one element in a million, one row, one channel.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.task import SourceFile, build_model, call_factory, load_problem
from agents.verify import compare
from agents.verify.outputs import Anchor, judge_leaf
from agents.verify.serve import sample_leaves
from agents.verify.values import Unpacked

BENCH = Path(__file__).resolve().parents[2] / "bench" / "problems"


def _anchor(gold: torch.Tensor, *, eager: bool, seed: int = 12345) -> Anchor:
    """An anchor as the judge holds it; `fetch` answers as the reference's worker does."""

    def fetch(sample_seed):
        if sample_seed is None:
            return Unpacked([gold], [], {}), []
        leaves, sampled = sample_leaves([gold], sample_seed)
        return Unpacked(leaves, [], {}), sampled

    return Anchor(fetch, eager=eager, sample_seed=seed)


def verdicts(cand: torch.Tensor, ref: torch.Tensor, gold: torch.Tensor) -> tuple[bool, bool]:
    """(the sampled flow's verdict, the full check's verdict) on one output."""
    sampled = judge_leaf(cand, ref, _anchor(gold, eager=True), 0, 1)
    whole = compare.compare_output(cand, ref, gold)
    return sampled.ok, whole.ok


def test_a_large_output_is_sampled_and_a_small_one_is_not():
    big, small = torch.randn(compare.ANCHOR_SAMPLE + 1, dtype=torch.float64), torch.randn(7)
    leaves, sampled = sample_leaves((big, [small, 3.0]), seed=9)
    assert sampled == [big.numel(), None, None]
    assert leaves[0].shape == (compare.ANCHOR_SAMPLE,) and leaves[1] is small
    picks = compare.sample_indices(big.numel(), 9)
    assert torch.equal(leaves[0], big[picks])  # the parent draws the same indices again


def test_the_figures_come_from_the_sample_and_say_so():
    ref64 = torch.randn(2048, 1024, dtype=torch.float64)
    ref = ref64.float()
    result = judge_leaf(ref.clone(), ref, _anchor(ref64, eager=True), 0, 1)
    assert result.ok and result.sampled and result.strict_ok
    assert result.error_ratio is not None


def _planted(shape, where: str, size: float, seed: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    ref64 = torch.randn(shape, generator=generator, dtype=torch.float64)
    ref = ref64.float()
    cand = ref.clone()
    if where == "element":
        flat = cand.view(-1)
        flat[int(torch.randint(flat.numel(), (1,), generator=generator))] += size
    elif where == "row":
        cand[int(torch.randint(shape[0], (1,), generator=generator))] += size
    else:  # one channel of an NCHW output
        cand[:, int(torch.randint(shape[1], (1,), generator=generator))] += size
    return cand, ref, ref64


@settings(max_examples=30, deadline=None)
@given(
    where=st.sampled_from(["element", "row", "channel"]),
    size=st.floats(min_value=1e-3, max_value=1e3) | st.floats(min_value=-1e3, max_value=-1e-3),
    seed=st.integers(min_value=0, max_value=2**31),
)
def test_a_planted_error_is_caught(where, size, seed):
    shape = (1000, 1000) if where != "channel" else (4, 64, 64, 64)
    cand, ref, ref64 = _planted(shape, where, size, seed)
    assert verdicts(cand, ref, ref64) == (False, False)


def test_one_element_in_a_million_is_caught_at_any_sample():
    """The element the sample is least likely to hold: one in 10^6, just over the rule."""
    for seed in range(5):
        cand, ref, ref64 = _planted((1000, 1000), "element", 2e-3, seed)
        sampled = judge_leaf(cand, ref, _anchor(ref64, eager=True, seed=seed), 0, 1)
        assert not sampled.ok and not sampled.strict_ok


def test_an_output_that_needs_the_band_passes_only_on_the_whole_anchor():
    """Off the strict rule but within the float64 band: the sampled flow asks for the whole
    anchor and reaches the full check's verdict."""
    ref64 = torch.randn(1024, 1024, dtype=torch.float64) * 1e4
    ref = ref64.float()
    cand = (ref64 + 1e4 * 3e-7 * torch.randn_like(ref64)).float()  # fp32-sized error
    fetches = []
    anchor = _anchor(ref64, eager=True)
    inner = anchor._fetch
    anchor._fetch = lambda seed: fetches.append(seed) or inner(seed)
    result = judge_leaf(cand, ref, anchor, 0, 1)
    whole = compare.compare_output(cand, ref, ref64)
    assert result.ok == whole.ok
    assert fetches == [None] and anchor.full and not result.sampled


def _bench_output(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    reference = SourceFile.from_path(BENCH / f"{name}.py")
    problem = load_problem(reference)
    torch.manual_seed(0)
    init = call_factory(problem.get_init_inputs, reference, "get_init_inputs")
    model = build_model(problem.model_class, init, reference)
    inputs = call_factory(problem.get_inputs, reference, "get_inputs")
    with torch.no_grad():
        out = model(*inputs)
        model64 = model.double()
        gold = model64(*[x.double() if x.is_floating_point() else x for x in inputs])
    return out, gold


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.stem for p in BENCH.glob("[0-9]*.py")))
def test_the_sampled_flow_decides_as_the_full_check_on_the_bench_suite(name):
    """Each bench problem's real output, honest and off by growing amounts (in units of the
    strict tolerance, relative to each element): the same verdict both ways."""
    out, gold = _bench_output(name)
    if not isinstance(out, torch.Tensor):
        pytest.skip("not a single-tensor output")
    generator = torch.Generator().manual_seed(1)
    noise = torch.randn(out.shape, generator=generator)
    tolerance = compare.STRICT_TOLERANCE[out.dtype]
    seen = set()
    for scale in (0.0, 0.3, 3.0, 30.0, 3000.0):
        cand = out + scale * tolerance * (1 + out.abs()) * noise
        sampled, whole = verdicts(cand, out, gold)
        assert sampled == whole, scale
        seen.add(whole)
    assert seen == {True, False}  # the amounts reach both verdicts
