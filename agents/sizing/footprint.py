"""What one forward of a problem holds at once, and what a whole evaluation needs.

Torch-free, so the parent can read a footprint a child traced.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

GB = 1e9

NEED_FACTOR = 4
"""An evaluation holds about four forwards' worth of memory at once: the reference's worker
keeps Model, its inputs and output in float32 and runs the float64 anchor beside them (twice
the bytes of every tensor: 3 forwards' worth), and the candidate's worker one more. Timing's
K input sets per request are capped by the clock itself to a share of free memory
(agents/verify/clock.py `_set_calls`), so they are not counted here."""

WORKER_FACTOR = 3
"""The reference's worker alone: float32 plus the float64 anchor (see NEED_FACTOR)."""

PROFILE_FACTOR = 2
"""`profile` runs only the reference, in one process, but draws the next forward's inputs
while the last one's output may still be alive."""

# `--size fit`'s budgets (agents/sizing/fit.py states the rule).
MEMORY_SHARE = 0.5
FORWARD_SECONDS = 0.02
FLOPS_PER_S = {"cpu": 20e9, "cuda": 50e12}  # a modest CPU's fp32 matmul; an H100 well below peak
BYTES_PER_S = {"cpu": 5e9, "cuda": 2e12}


@dataclass(frozen=True)
class Footprint:
    """Bytes and FLOPs of one forward, traced on the meta device (nothing allocated)."""

    inputs_bytes: int  # what get_inputs() returns
    weights_bytes: int  # Model's parameters and buffers
    activations_bytes: int  # peak of the tensors the forward holds at once, its output included
    output_bytes: int
    written_bytes: int  # every tensor the forward creates, summed: the traffic it writes
    flops: int  # matmuls and convolutions, as torch.utils.flop_counter counts them

    @property
    def forward_bytes(self) -> int:
        """Peak memory of one forward: inputs, weights and the activations alive at once."""
        return self.inputs_bytes + self.weights_bytes + self.activations_bytes

    @property
    def need_bytes(self) -> int:
        """Memory a whole evaluation holds at once (see NEED_FACTOR)."""
        return NEED_FACTOR * self.forward_bytes

    @property
    def worker_bytes(self) -> int:
        """Memory the reference's worker holds at once (see WORKER_FACTOR)."""
        return WORKER_FACTOR * self.forward_bytes

    @property
    def traffic_bytes(self) -> int:
        """Bytes one forward reads and writes at least: inputs, weights, what it creates."""
        return self.inputs_bytes + self.weights_bytes + self.written_bytes

    def parts(self) -> str:
        """`inputs 6.4 GB, weights 0 GB, activations 6.4 GB`, for the one-line refusal."""
        return (
            f"inputs {gb(self.inputs_bytes)}, weights {gb(self.weights_bytes)}, "
            f"activations {gb(self.activations_bytes)}"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Footprint:
        return cls(**{name: int(data[name]) for name in cls.__dataclass_fields__})


def gb(count: float) -> str:
    """Bytes as `6.4 GB` (or `12 MB` below a tenth of a GB)."""
    if count < 0.1 * GB:
        return f"{count / 1e6:.0f} MB"
    return f"{count / GB:.1f} GB"
