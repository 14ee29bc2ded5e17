"""Which calls of a timed request the parent opens, chosen once every commitment is in.

Why openings: a timed reply carries only commitments (agents/verify/commitment.py). Opening
call j means: fetch the candidate's output of call j in full, compare it with the
reference's output for the same inputs (and the float64 anchor) as a trial does, and have the
REFERENCE's process recompute the commitment of those exact bytes under the request's key
(agents/verify/proof.py `claim_mismatch`): the claim must be the commitment of the output
the worker returns. A worker that lies on some calls (commits to values it never formed, and
forms them only when asked) cannot know which calls will be opened: the choice is made with
the system's randomness after its reply is in.

How many: each request is opened with probability q = min(1, max(`floor_share`,
`request_bytes` / output bytes)) at one uniformly random call (q = 1, every request, for
outputs of up to 64 KiB: they are cheap to fetch and compare), and a thorough request (the
first timed one, and the re-verification of a large speedup) opens
min(K, `thorough`) distinct calls, fewer where that would fetch over `thorough_bytes`.
A worker that lies on a share f of its calls at random escapes m openings with probability
(1 - f)^m. A measurement makes at least 10 timed requests, so for outputs up to 64 KiB
m >= min(K, 8) + 9: with K >= 8 a lie on 20% of the calls escapes with 0.8^17 < 2.5%, one on
half of them with 0.5^17 < 1e-5, and with K = 1 every call is opened. For larger outputs q
falls towards `floor_share` and bounds the bytes fetched; a worker lying on r whole requests
then escapes with (1 - q)^r.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class OpeningPolicy:
    thorough: int = 8
    thorough_bytes: int = 64 << 20
    request_bytes: int = 64 << 10
    floor_share: float = 0.1


@dataclass(frozen=True)
class Opening:
    """One opened call, and what the candidate's reply committed to for it."""

    key: int
    calls: int
    call: int
    scales: tuple[float, ...]
    claimed: tuple  # the candidate's entries for this call, as its reply gave them
    bands: tuple  # the reference's bands for the same call (the yardstick of rounding)


class Openings:
    """Draws which calls to open (with the system's randomness) and counts them."""

    def __init__(self, policy: OpeningPolicy | None = None) -> None:
        self.policy = policy or OpeningPolicy()
        self.rng = random.SystemRandom()
        self.opened = 0
        self.timed_calls = 0

    def choose(self, calls: int, output_bytes: int, thorough: bool) -> list[int]:
        """The calls of a request of `calls` to open, in order; none, often, for outputs
        too large to fetch every time."""
        policy, size = self.policy, max(int(output_bytes), 1)
        self.timed_calls += calls
        if thorough:
            count = min(calls, policy.thorough, max(1, policy.thorough_bytes // size))
            chosen = sorted(self.rng.sample(range(calls), count))
        else:
            share = min(1.0, max(policy.floor_share, policy.request_bytes / size))
            chosen = [self.rng.randrange(calls)] if self.rng.random() < share else []
        self.opened += len(chosen)
        return chosen

    def note(self) -> str:
        return (
            f"opened {self.opened} of {self.timed_calls} timed calls in full, chosen after "
            "each reply: each output compared with the reference's, and its commitment "
            "recomputed by the reference's process"
        )
