"""The parent's reading of timed replies: do the candidate's commitments match the reference's
(`checksum_mismatch`), and does an opened call's claim match the commitment of the bytes the
candidate then returned, recomputed by the reference's process (`claim_mismatch`).

Why both: the first says the candidate's timed outputs are the reference's to within
allclose's allowance, if the claims are true; the second makes them true for the calls the
parent opens, which the worker cannot foresee (agents/verify/openings.py). Nothing here is
computed by the candidate's process except the claims themselves.
"""

from __future__ import annotations

import math
from typing import Any

from agents.sandbox.wire import Frame
from agents.verify.openings import Opening

FINGERPRINT_SIGMAS = 6.0
ROUNDING_SHARE = 0.05
"""A claim and the reference's recomputation of the same bytes (same code, same device, same
key) differ by float rounding only: far less than this share of the band."""


def checksum_mismatch(ref: Frame, band: Frame, cand: Frame, label: str) -> str | None:
    """Why a timed output cannot be the reference's output for the same inputs, or None.

    Floating outputs: the commitments' difference must stay within FINGERPRINT_SIGMAS standard
    deviations of what allclose's full allowance on every element would give (a wrong or
    unfinished output misses by orders of magnitude). Integers: exact."""
    mine = cand.header.get("checksum")
    theirs = ref.header.get("checksum") or []
    bands = band.header.get("band") or []
    if not isinstance(mine, list) or len(mine) != len(theirs):
        return f"{label}: its output has another structure than during verification"
    for index, (c, r) in enumerate(zip(mine, theirs, strict=True)):
        sigma = bands[index] if index < len(bands) else None
        problem = _entry_mismatch(c, r, sigma, FINGERPRINT_SIGMAS, 1e-6)
        if problem == "differs" and sigma is not None:
            off = abs(float(c["sum"]) - float(r["sum"]))
            allowed = FINGERPRINT_SIGMAS * sigma + 1e-6 * abs(float(r["sum"]))
            return (
                f"{label}: output {index} differs from the reference's: its commitment is "
                f"off by {off:.3g} where {FINGERPRINT_SIGMAS:g} standard deviations of "
                f"allclose's allowance are {allowed:.3g}"
            )
        if problem:
            return f"{label}: output {index} {problem}"
    return None


def claim_mismatch(opening: Opening, recomputed: Any, label: str) -> str | None:
    """Why the candidate's claim for an opened call is not the commitment of the output it
    returned for that call (recomputed by the reference's process), or None."""
    claimed = list(opening.claimed)
    if not isinstance(recomputed, list) or len(recomputed) != len(claimed):
        return f"{label}: the reference could not recompute the commitment of call {opening.call}"
    for index, (c, r) in enumerate(zip(claimed, recomputed, strict=True)):
        sigma = opening.bands[index] if index < len(opening.bands) else None
        if _entry_mismatch(c, r, sigma, ROUNDING_SHARE, 1e-9):
            return (
                f"{label}: its timed reply committed to another output than the one it "
                f"returned for call {opening.call + 1} of {opening.calls} (output {index})"
            )
    return None


def _entry_mismatch(c: Any, r: Any, sigma: Any, sigmas: float, relative: float) -> str | None:
    """None when entry c matches entry r: kinds, sizes and scalars alike, integer sums equal,
    float sums within `sigmas` times sigma plus `relative` of the sum."""
    if not isinstance(c, dict) or not isinstance(r, dict) or c.get("kind") != r.get("kind"):
        return "is of another kind than the reference's"
    if "scalar" in r:
        return None if c.get("scalar") == r["scalar"] else "differs from the reference's"
    c_sum, r_sum = c.get("sum"), r.get("sum")
    if (
        c.get("numel") != r.get("numel")
        or c.get("dtype") != r.get("dtype")
        or not isinstance(c_sum, int | float)
        or not isinstance(r_sum, int | float)
    ):
        return "differs from the reference's in size or type"
    if not isinstance(sigma, int | float):
        return None if c_sum == r_sum and type(c_sum) is type(r_sum) else "differs"
    if not (math.isfinite(c_sum) and math.isfinite(r_sum)):
        return "differs"  # a commitment is finite whatever the output holds
    allowed = sigmas * float(sigma) + relative * abs(r_sum)
    return None if abs(c_sum - r_sum) <= allowed else "differs"
