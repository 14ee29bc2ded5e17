"""The commitment a timed reply makes (agents/verify/commitment.py, checksums.py) needs the
output itself: every element, to within its allowance. Honest outputs stay in band; a wrong
element, a linear shortcut or a non-finite value does not; the reference's recomputation of
one call (an opening) is the worker's own value; openings are drawn from the system."""

from __future__ import annotations

import math
import random

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.sandbox.wire import Frame
from agents.verify import checksums, commitment
from agents.verify.openings import Opening, OpeningPolicy, Openings
from agents.verify.proof import FINGERPRINT_SIGMAS, checksum_mismatch, claim_mismatch


def _entry(value: torch.Tensor, key: int, scales=None) -> tuple[float, float]:
    """(commitment, band) of one tensor as a request of one call."""
    return (
        checksums.checksum(value, key, scales)[0]["sum"],
        checksums.checksum_band(value, key, scales)[0],
    )


def _frame(**header) -> Frame:
    return Frame(header=header, payload=b"")


def test_one_element_moved_by_its_size_leaves_the_band_for_most_keys():
    """A wrong element (off by about the output's RMS) moves the commitment by ~w_i, far
    beyond the band of an output of a few thousand elements, whatever its position."""
    torch.manual_seed(0)
    reference = torch.randn(64, 64)
    scales = checksums.commitment_scales(reference)
    caught = 0
    for key in range(40):
        wrong = reference.clone()
        wrong.view(-1)[random.Random(key).randrange(wrong.numel())] += 1.0
        value, band = _entry(reference, key, scales)
        moved, _ = _entry(wrong, key, scales)
        caught += abs(moved - value) > FINGERPRINT_SIGMAS * band
    assert caught >= 30, caught


def test_the_linear_part_of_the_commitment_does_not_reproduce_it():
    """The best a projection can do is the commitment's linearisation: per element the
    weight w_i s_i cos(b_i), a linear functional of X = A B (a bilinear one of A and B).
    It misses the commitment by orders of magnitude more than the band."""
    torch.manual_seed(1)
    a, b = torch.randn(48, 32), torch.randn(32, 40)
    product = a @ b
    scales = checksums.commitment_scales(product)
    value, band = _entry(product, 7, scales)
    flat = product.reshape(1, -1)
    table, weights, phases = commitment._draw(7, 0, 1, flat.numel(), flat.device, torch.float32)
    weight, phase = commitment._keys(table, weights, phases, flat.numel())
    frequency = scales[0] * (1 + 3 * weight)
    linear = (weight * (torch.sin(phase) + frequency * torch.cos(phase) * flat)).sum()
    assert abs(float(linear) - value) > 100 * FINGERPRINT_SIGMAS * band


def test_the_commitment_is_not_additive():
    torch.manual_seed(2)
    x, y = torch.randn(1000), torch.randn(1000)
    zero = torch.zeros(1000)
    scales = [1.0]
    fx, band = _entry(x, 3, scales)
    fy, _ = _entry(y, 3, scales)
    fxy, _ = _entry(x + y, 3, scales)
    f0, _ = _entry(zero, 3, scales)
    assert abs(fxy - (fx + fy - f0)) > 100 * band


def test_honest_float32_outputs_stay_in_band():
    """float32 against float64 of the same product, and a perturbation of every element by
    up to allclose's full allowance with random signs: both within the band."""
    torch.manual_seed(3)
    a, b = torch.randn(128, 256, dtype=torch.float64), torch.randn(256, 96, dtype=torch.float64)
    exact = (a @ b).float()
    computed = a.float() @ b.float()
    scales = checksums.commitment_scales(exact)
    for key in range(10):
        value, band = _entry(exact, key, scales)
        assert abs(_entry(computed, key, scales)[0] - value) <= FINGERPRINT_SIGMAS * band
        allowance = 1e-4 * (1 + exact.abs())
        signs = torch.randint(0, 2, exact.shape).float() * 2 - 1
        moved = exact + signs * allowance * torch.rand(exact.shape)
        assert abs(_entry(moved, key, scales)[0] - value) <= FINGERPRINT_SIGMAS * band


def test_integers_and_booleans_are_committed_exactly():
    torch.manual_seed(4)
    counts = torch.randint(-1000, 1000, (300,))
    flags = counts > 0
    one, band = _entry(counts, 5)
    assert band is None
    assert checksums.checksum(counts.clone(), 5)[0]["sum"] == one
    changed = counts.clone()
    changed[17] += 1
    assert checksums.checksum(changed, 5)[0]["sum"] != one
    flipped = flags.clone()
    flipped[3] = ~flipped[3]
    assert checksums.checksum(flipped, 5)[0]["sum"] != checksums.checksum(flags, 5)[0]["sum"]
    assert isinstance(one, int)


def test_nan_and_inf_are_committed_where_they_are():
    torch.manual_seed(5)
    base = torch.randn(500)
    scales = checksums.commitment_scales(base)
    variants = {}
    for name, value in (("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf)):
        changed = base.clone()
        changed[10] = value
        variants[name] = _entry(changed, 9, scales)[0]
        assert math.isfinite(variants[name])
    finite, band = _entry(base, 9, scales)
    values = [finite, *variants.values()]
    for i, first in enumerate(values):
        for second in values[i + 1 :]:
            assert abs(first - second) > FINGERPRINT_SIGMAS * band
    again = base.clone()
    again[10] = math.nan
    assert _entry(again, 9, scales)[0] == variants["nan"]
    assert checksums.checksum_band(again, 9, scales)[0] > 0


def test_the_reference_recomputes_any_call_of_a_request_as_the_worker_did():
    """Small leaves go stacked, large ones in pieces: one call alone, recomputed with the
    request's key, K and its index, gives the entries of that call within the request."""
    torch.manual_seed(6)
    size = commitment.PIECE + 12_345  # more than one piece
    outputs = [
        (torch.randn(70, 30), torch.randint(0, 5, (9,)), torch.randn(size), 1.5) for _ in range(5)
    ]
    scales = checksums.commitment_scales(outputs[0])
    entries = checksums.call_checksums(outputs, 11, scales)
    bands = checksums.call_bands(outputs, 11, scales)
    width = 4
    for call in range(5):
        mine = entries[call * width : (call + 1) * width]
        again = checksums.recommit(outputs[call], 11, scales, 5, call)
        opening = Opening(
            11,
            5,
            call,
            tuple(scales),
            tuple(mine),
            tuple(bands[call * width : (call + 1) * width]),
        )
        assert claim_mismatch(opening, again, "opening") is None
        assert again[1] == mine[1] and again[3] == mine[3]
    # another call's claim is not this output's
    forged = Opening(11, 5, 0, tuple(scales), tuple(entries[width : 2 * width]), tuple(bands))
    assert claim_mismatch(forged, checksums.recommit(outputs[0], 11, scales, 5, 0), "x")


def test_every_call_and_every_key_commits_differently():
    torch.manual_seed(7)
    same = torch.randn(200)
    entries = checksums.call_checksums([same, same.clone()], 13, [1.0])
    assert entries[0]["sum"] != entries[1]["sum"]  # a replayed output misses
    assert checksums.checksum(same, 14)[0]["sum"] != checksums.checksum(same, 13)[0]["sum"]


def test_checksum_mismatch_reads_bands_and_exact_entries():
    tensor = {"kind": "tensor", "numel": 4, "dtype": "torch.float32"}
    ints = {"kind": "tensor", "numel": 4, "dtype": "torch.int64"}
    ref = _frame(checksum=[{**tensor, "sum": 1.0}, {**ints, "sum": 5}])
    band = _frame(band=[0.01, None])
    assert (
        checksum_mismatch(
            ref, band, _frame(checksum=[{**tensor, "sum": 1.05}, {**ints, "sum": 5}]), "t"
        )
        is None
    )
    assert checksum_mismatch(
        ref, band, _frame(checksum=[{**tensor, "sum": 1.2}, {**ints, "sum": 5}]), "t"
    )
    assert checksum_mismatch(
        ref, band, _frame(checksum=[{**tensor, "sum": 1.0}, {**ints, "sum": 6}]), "t"
    )
    nan = [{**tensor, "sum": math.nan}, {**ints, "sum": 5}]
    assert checksum_mismatch(ref, band, _frame(checksum=nan), "t")


def test_openings_cover_small_outputs_every_request_and_bound_large_ones():
    openings = Openings(OpeningPolicy())
    assert isinstance(openings.rng, random.SystemRandom)
    first = openings.choose(100, 4096, thorough=True)
    assert len(first) == len(set(first)) == 8 and all(0 <= c < 100 for c in first)
    assert all(len(openings.choose(100, 4096, thorough=False)) == 1 for _ in range(50))
    big = sum(len(openings.choose(3, 1 << 30, thorough=False)) for _ in range(2000))
    assert 100 < big < 320  # the floor share, 10%
    assert len(openings.choose(20, 1 << 30, thorough=True)) == 1  # 64 MiB fetched at most
    assert "opened" in openings.note()


@settings(max_examples=60, deadline=None)
@given(
    numel=st.integers(1, 20_000),
    key=st.integers(0, 2**62),
    magnitude=st.sampled_from([1e-3, 1.0, 1e3]),
    share=st.floats(0.0, 1.0),
)
def test_a_perturbation_within_allowance_stays_in_band(numel, key, magnitude, share):
    """Any output, any key, any scale: every element moved by at most its allowance (a random
    sign, any share of it) stays within the band's six standard deviations."""
    generator = torch.Generator().manual_seed(key % (2**31))
    reference = torch.randn(numel, generator=generator) * magnitude
    scales = checksums.commitment_scales(reference)
    value, band = _entry(reference, key, scales)
    assert band > 0
    allowance = 1e-4 * (1 + reference.abs())
    signs = torch.randint(0, 2, (numel,), generator=generator).float() * 2 - 1
    moved = reference + signs * allowance * share
    assert abs(_entry(moved, key, scales)[0] - value) <= FINGERPRINT_SIGMAS * band


RETURNS_OTHER_BYTES = """
import pkgutil

import torch
import torch.nn as nn

_serve = pkgutil.resolve_name("agents.verify.serve")
_honest = _serve.handle


def _other(side, op, header, payload):
    answer = _honest(side, op, header, payload)
    if op == "calls":  # commits to its outputs, then holds others (still within allclose)
        side.outputs = [
            out + 3e-5 * (1 + out.abs()) * (torch.randint_like(out, 0, 2) * 2 - 1)
            for out in side.outputs
        ]
    return answer


_serve.handle = _other


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))
"""


def test_an_opened_call_must_return_the_output_its_reply_committed_to():
    """Its timed replies are honest commitments, and every output it returns passes
    allclose; but the bytes it returns for an opened call are not the ones it committed to,
    which the reference's recomputation shows: a forged reply, rejected."""
    from agents.verify.verdict import Verdict
    from tests.conftest import candidate_source, run_eval

    result = run_eval("linear_relu.py", candidate_source(RETURNS_OTHER_BYTES), static_check=False)
    assert result.verdict is Verdict.REJECTED, result.reasons
    assert "committed to another output" in " ".join(result.reasons), result.reasons


def test_a_gpu_sized_piece_commits_to_what_cpu_sized_pieces_do(monkeypatch):
    """The GPU cuts an output into larger pieces than the CPU (GPU_PIECE): the commitment
    is the same sum in another order, within 5% of its band (float32 rounding: about 1%), so
    the piece size moves no claim towards the band's edge."""
    torch.manual_seed(8)
    outputs = [torch.randn(3 * commitment.PIECE + 999) for _ in range(3)]
    scales = checksums.commitment_scales(outputs[0])
    small = checksums.call_checksums(outputs, 21, scales)
    monkeypatch.setattr(commitment, "PIECE", commitment.GPU_PIECE)
    large = checksums.call_checksums(outputs, 21, scales)
    bands = checksums.call_bands(outputs, 21, scales)
    for first, second, band in zip(small, large, bands, strict=True):
        assert abs(first["sum"] - second["sum"]) < 0.05 * band, (first, second, band)
    assert commitment.piece_elements(torch.device("cpu")) == commitment.GPU_PIECE  # patched
    assert commitment.piece_elements(torch.device("cuda")) == commitment.GPU_PIECE
