"""What an experience is, and when a measured attempt becomes one (AccelOpt's policy).

An experience is a pair of kernels (slow -> fast), the measured speedup and what the
summarizer learnt from it. These are plain values: storing them is `storage`'s job, finding
similar ones `retrieval`'s.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Kind = Literal["positive", "negative"]
TARGETS = ("torch", "cpu-cpp", "cuda", "triton")
FEEDBACK = ("none", "accepted", "rejected")


@dataclass(frozen=True)
class TaskSignature:
    """What a kernel task looks like, for finding experiences from similar tasks."""

    op_categories: tuple[str, ...] = ()
    shapes: tuple[tuple[int, ...], ...] = ()  # input shapes of the hot ops
    dtype: str = ""
    target: str = "torch"  # torch | cpu-cpp | cuda | triton
    device_name: str = ""

    def __post_init__(self) -> None:
        cats = tuple(sorted({str(c).strip().lower() for c in self.op_categories} - {""}))
        object.__setattr__(self, "op_categories", cats)
        object.__setattr__(self, "shapes", tuple(tuple(int(d) for d in s) for s in self.shapes))

    @property
    def numel(self) -> int:
        """Total elements over the hot ops' inputs (0 when unknown)."""
        return sum(math.prod(shape) for shape in self.shapes)

    def to_json(self) -> dict[str, Any]:
        return {
            "op_categories": list(self.op_categories),
            "shapes": [list(shape) for shape in self.shapes],
            "dtype": self.dtype,
            "target": self.target,
            "device_name": self.device_name,
        }

    @classmethod
    def from_json(cls, data: Any) -> TaskSignature:
        if not isinstance(data, dict):
            raise ValueError("signature is not an object")
        cats = data.get("op_categories", [])
        shapes = data.get("shapes", [])
        if not isinstance(cats, list) or not all(isinstance(c, str) for c in cats):
            raise ValueError("signature.op_categories is not a list of strings")
        if not isinstance(shapes, list) or not all(
            isinstance(s, list) and all(isinstance(d, int) and d >= 0 for d in s) for s in shapes
        ):
            raise ValueError("signature.shapes is not a list of lists of sizes")
        texts = {key: data.get(key, default) for key, default in _SIGNATURE_TEXT.items()}
        for key, value in texts.items():
            if not isinstance(value, str):
                raise ValueError(f"signature.{key} is not a string")
        return cls(op_categories=tuple(cats), shapes=tuple(tuple(s) for s in shapes), **texts)


_SIGNATURE_TEXT = {"dtype": "", "target": "torch", "device_name": ""}


@dataclass(kw_only=True)
class Experience:
    """One lesson, always stored as slow -> fast (negatives are swapped; see `from_attempt`).

    `speedup` is what was measured for the candidate over its parent: above 1 for a
    positive, below 1 for a negative. `gain` is the slow -> fast ratio either way.
    """

    id: int | None = None
    signature: TaskSignature
    slow_source: str
    fast_source: str
    speedup: float
    plan: str = ""
    title: str = ""
    lesson: str = ""
    model: str = "offline"
    created_at: float = field(default_factory=time.time)
    feedback: str = "none"  # none | accepted | rejected
    kind: str = ""  # positive | negative; set by the store from the speedup
    source_hash: str = ""  # sha256 of the normalised fast source; set by the store

    @property
    def gain(self) -> float:
        return gain_of(self.speedup, self.kind)

    def summary(self) -> str:
        """The line a planner reads under its "Experiences" header (the code stays out)."""
        head = self.title or (self.plan.strip().splitlines() or [""])[0]
        if self.kind == "negative":
            tag = f"[negative: the change made it {self.gain:.2f}x slower]"
        else:
            tag = f"[positive: {self.gain:.2f}x faster]"
        return " ".join(part for part in (tag, head, self.lesson) if part)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["signature"] = self.signature.to_json()
        return data

    @classmethod
    def from_json(cls, data: Any) -> Experience:
        """Validates types; raises ValueError with a short description of the first problem."""
        if not isinstance(data, dict):
            raise ValueError("not an object")
        for key in ("slow_source", "fast_source"):
            if not isinstance(data.get(key), str):
                raise ValueError(f"missing or non-string field {key!r}")
        speedup = data.get("speedup")
        if isinstance(speedup, bool) or not isinstance(speedup, int | float):
            raise ValueError("missing or non-numeric field 'speedup'")
        if not math.isfinite(speedup) or speedup <= 0:
            raise ValueError(f"speedup {speedup!r} is not a positive number")
        texts = {}
        for key in ("plan", "title", "lesson", "model", "feedback", "kind", "source_hash"):
            value = data.get(key, "")
            if not isinstance(value, str):
                raise ValueError(f"field {key!r} is not a string")
            texts[key] = value
        texts["model"] = texts["model"] or "unknown"
        if texts["feedback"] not in ("", *FEEDBACK):
            raise ValueError(f"feedback {texts['feedback']!r} is not one of {FEEDBACK}")
        created = data.get("created_at", time.time())
        if isinstance(created, bool) or not isinstance(created, int | float):
            raise ValueError("field 'created_at' is not a number")
        return cls(
            signature=TaskSignature.from_json(data.get("signature", {})),
            slow_source=data["slow_source"],
            fast_source=data["fast_source"],
            speedup=float(speedup),
            created_at=float(created),
            **{**texts, "feedback": texts["feedback"] or "none"},
        )


@dataclass(frozen=True)
class MemoryPolicy:
    """AccelOpt's memory settings (its shipped defaults), plus our retrieval knobs."""

    positive_threshold: float = 1.04  # keep as positive when speedup > this
    negative_threshold: float = 1 / 1.15  # keep as negative when speedup < this
    capacity: int = 16  # experiences in one planner prompt
    max_new_per_iteration: int = 8
    max_positive_share: float = 0.5
    min_relevance: float = 0.35  # retrieval score below which an entry is "not relevant"
    seed: int = 0  # for the random top-up in select_for_prompt

    def __post_init__(self) -> None:
        if not 0 < self.negative_threshold <= 1 <= self.positive_threshold:
            raise ValueError("need 0 < negative_threshold <= 1 <= positive_threshold")
        if self.capacity < 1 or self.max_new_per_iteration < 1:
            raise ValueError("capacity and max_new_per_iteration must be at least 1")
        if not 0 <= self.max_positive_share <= 1:
            raise ValueError("max_positive_share must be in [0, 1]")

    def classify(self, speedup: float) -> Kind | None:
        if speedup > self.positive_threshold:
            return "positive"
        if 0 < speedup < self.negative_threshold:
            return "negative"
        return None


def from_attempt(
    policy: MemoryPolicy,
    signature: TaskSignature,
    parent_source: str,
    candidate_source: str,
    speedup: float,
    **text: Any,
) -> Experience | None:
    """The experience a measured candidate yields, or None when its speedup is neutral.

    A slower candidate is stored swapped (slow = the candidate, fast = its parent), so the
    summarizer always reads slow -> fast. `text`: plan, title, lesson, model, created_at.
    """
    kind = policy.classify(speedup)
    if kind is None:
        return None
    slow, fast = (parent_source, candidate_source)
    if kind == "negative":
        slow, fast = fast, slow
    return Experience(
        signature=signature,
        slow_source=slow,
        fast_source=fast,
        speedup=speedup,
        kind=kind,
        **text,
    )


def gain_of(speedup: float, kind: str) -> float:
    """The slow -> fast ratio of an entry, whichever way round it was measured."""
    return 1 / speedup if kind == "negative" and speedup > 0 else speedup
