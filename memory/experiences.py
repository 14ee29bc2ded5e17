"""AccelOpt's optimization memory, persisted and shared across tasks.

An experience is a pair of kernels (slow -> fast), the measured speedup and what the
summarizer learnt from it. AccelOpt keeps the memory per task; here it lives in the shared
SQLite store and the planner gets the entries most similar to its task (`retrieve`,
`select_for_prompt`), so a lesson learnt on one GEMM+ReLU helps the next one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
import threading
import time
import zlib
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np

from memory.normalize import normalized_source
from memory.store import MemoryStore, Transaction, scrub

Kind = Literal["positive", "negative"]
TARGETS = ("torch", "cpu-cpp", "cuda", "triton")
FEEDBACK = ("none", "accepted", "rejected")
EXPORT_FORMAT = "kernel-agent.experiences"
EXPORT_VERSION = 1
_REV_KEY = "experiences_rev"
_SEP = "\x1f"

# Retrieval score = SIGNATURE_WEIGHT * signature similarity + TEXT_WEIGHT * text similarity,
# both in [0, 1]. Signature similarity is the weighted sum below (weights add up to 1).
SIGNATURE_WEIGHT = 0.5
TEXT_WEIGHT = 0.5
W_OPS = 0.35  # Jaccard of the op categories: what the kernel computes matters most
W_TARGET = 0.25  # a CUDA lesson rarely transfers to a Triton or torch rewrite
W_SHAPE = 0.20  # 1 - |ln(numel ratio)| / ln(1000), floored at 0: 10x apart gives 0.67
W_DTYPE = 0.10
W_DEVICE = 0.10
_SHAPE_SPAN = math.log(1000.0)
_FEEDBACK_RANK = {"accepted": 2, "none": 1, "rejected": 0}


class MemoryFileError(ValueError):
    """An export file that cannot be imported; the message is one line naming the file."""


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
        return _gain(self.speedup, self.kind)

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


def _gain(speedup: float, kind: str) -> float:
    return 1 / speedup if kind == "negative" and speedup > 0 else speedup


def _pair_hash(slow_normalized: str, fast_normalized: str) -> str:
    joined = slow_normalized + "\x00" + fast_normalized
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()


_COLUMNS = (
    "id, kind, feedback, created_at, speedup, model, title, signature, plan, lesson, "
    "slow_source, fast_source, source_hash"
)


def _row_to_experience(row: Any) -> Experience:
    return Experience(
        id=row["id"],
        signature=TaskSignature.from_json(json.loads(row["signature"])),
        slow_source=row["slow_source"],
        fast_source=row["fast_source"],
        speedup=row["speedup"],
        plan=row["plan"],
        title=row["title"],
        lesson=row["lesson"],
        model=row["model"],
        created_at=row["created_at"],
        feedback=row["feedback"],
        kind=row["kind"],
        source_hash=row["source_hash"],
    )


class ExperienceStore:
    """The optimization memory over a `MemoryStore`; safe to use from several processes."""

    def __init__(self, store: MemoryStore, policy: MemoryPolicy | None = None):
        self.store = store
        self.policy = policy or MemoryPolicy()
        self._index: _Index | None = None
        self._index_lock = threading.Lock()
        self._backfill()

    def classify(self, speedup: float) -> Kind | None:
        return self.policy.classify(speedup)

    # writing -------------------------------------------------------------------------------

    def add(self, exp: Experience) -> int | None:
        """Store one experience (slow -> fast form); the id written, or None when nothing was.

        Neutral speedups are refused. An entry with the same normalised (slow, fast) pair is
        replaced only when the new gain is larger (its id and feedback are kept).
        """
        return self.add_many([exp])[0]

    def add_many(self, experiences: list[Experience]) -> list[int | None]:
        """`add` for each, in one transaction."""
        prepared = [self._prepare(exp) for exp in experiences]
        return self.store.write(
            lambda tx: self._bump([self._write(tx, p) if p else None for p in prepared], tx)
        )

    def add_iteration(self, candidates: list[Experience]) -> list[int]:
        """Add one search iteration's experiences under AccelOpt's per-iteration cap.

        Neutral ones are dropped and the rest ranked by gain (strongest lessons first),
        duplicates within the batch keeping the best. Positives are then taken up to
        floor(max_new_per_iteration * max_positive_share), negatives up to the remaining
        slots; an entry the store skips (a duplicate no better than what is stored) uses
        no slot. Returns the ids written, strongest first.
        """
        best: dict[str, _Prepared] = {}
        for exp in candidates:
            prepared = self._prepare(exp)
            if prepared is None:
                continue
            kept = best.get(prepared.pair_hash)
            if kept is None or prepared.exp.gain > kept.exp.gain:
                best[prepared.pair_hash] = prepared
        ranked = sorted(best.values(), key=lambda p: -p.exp.gain)
        limit = self.policy.max_new_per_iteration
        positive_cap = math.floor(limit * self.policy.max_positive_share)

        def write(tx: Transaction) -> list[int]:
            ids: list[int] = []
            positives = negatives = 0
            for prepared in ranked:
                if len(ids) >= limit:
                    break
                positive = prepared.exp.kind == "positive"
                if positive and positives >= positive_cap:
                    continue
                if not positive and negatives >= limit - positive_cap:
                    continue
                written = self._write(tx, prepared)
                if written is None:
                    continue
                ids.append(written)
                positives += positive
                negatives += not positive
            return self._bump(ids, tx)

        return self.store.write(write)

    def forget(self, exp_id: int) -> bool:
        def write(tx: Transaction) -> bool:
            gone = tx.execute("DELETE FROM experiences WHERE id = ?", (exp_id,)).rowcount > 0
            return self._bump(gone, tx) if gone else False

        return self.store.write(write)

    def set_feedback(self, exp_id: int, accepted: bool) -> bool:
        """Record the user's verdict on an entry; it breaks ties in retrieval."""
        value = "accepted" if accepted else "rejected"

        def write(tx: Transaction) -> bool:
            sql = "UPDATE experiences SET feedback = ? WHERE id = ?"
            changed = tx.execute(sql, (value, exp_id)).rowcount > 0
            return self._bump(changed, tx) if changed else False

        return self.store.write(write)

    def set_feedback_for_source(self, fast_source: str, accepted: bool) -> list[int]:
        """Record the user's verdict on a rewrite offered to them: every entry whose fast
        kernel is `fast_source` (after normalisation) gets it. Returns the ids changed."""
        value = "accepted" if accepted else "rejected"
        digest = hashlib.sha256(normalized_source(scrub(fast_source)).encode("utf-8")).hexdigest()

        def write(tx: Transaction) -> list[int]:
            rows = tx.execute(
                "SELECT id FROM experiences WHERE source_hash = ? AND feedback != ?",
                (digest, value),
            ).fetchall()
            ids = [int(row[0]) for row in rows]
            if ids:
                marks = ", ".join("?" for _ in ids)
                tx.execute(
                    f"UPDATE experiences SET feedback = ? WHERE id IN ({marks})", (value, *ids)
                )
                self._bump(True, tx)
            return ids

        return self.store.write(write)

    def _prepare(self, exp: Experience) -> _Prepared | None:
        kind = self.classify(exp.speedup)
        if kind is None:
            return None
        sig = exp.signature
        clean = Experience(
            id=None,
            signature=TaskSignature(
                op_categories=tuple(scrub(c) for c in sig.op_categories),
                shapes=sig.shapes,
                dtype=scrub(sig.dtype),
                target=scrub(sig.target),
                device_name=scrub(sig.device_name),
            ),
            slow_source=scrub(exp.slow_source),
            fast_source=scrub(exp.fast_source),
            speedup=float(exp.speedup),
            plan=scrub(exp.plan),
            title=scrub(exp.title),
            lesson=scrub(exp.lesson),
            model=scrub(exp.model),
            created_at=exp.created_at,
            feedback=exp.feedback if exp.feedback in FEEDBACK else "none",
            kind=kind,
        )
        slow_n = normalized_source(clean.slow_source)
        fast_n = normalized_source(clean.fast_source)
        clean.source_hash = hashlib.sha256(fast_n.encode("utf-8")).hexdigest()
        text = "\n".join((clean.title, clean.lesson, clean.plan, fast_n))
        return _Prepared(clean, _pair_hash(slow_n, fast_n), encode_terms(text))

    def _write(self, tx: Transaction, prepared: _Prepared) -> int | None:
        exp = prepared.exp
        sig = exp.signature
        row = tx.execute(
            "SELECT id, speedup, kind FROM experiences WHERE pair_hash = ?", (prepared.pair_hash,)
        ).fetchone()
        values = {
            "kind": exp.kind,
            "created_at": exp.created_at,
            "speedup": exp.speedup,
            "target": sig.target,
            "dtype": sig.dtype,
            "device_name": sig.device_name,
            "log_numel": math.log(sig.numel) if sig.numel > 0 else None,
            "op_categories": _SEP.join(sig.op_categories),
            "source_hash": exp.source_hash,
            "model": exp.model,
            "terms": prepared.terms,
            "title": exp.title,
            "signature": json.dumps(sig.to_json(), sort_keys=True),
            "plan": exp.plan,
            "lesson": exp.lesson,
            "slow_source": exp.slow_source,
            "fast_source": exp.fast_source,
        }
        if row is not None:
            if exp.gain <= _gain(row["speedup"], row["kind"]):
                return None
            assignments = ", ".join(f"{name} = ?" for name in values)
            tx.execute(
                f"UPDATE experiences SET {assignments} WHERE id = ?", (*values.values(), row["id"])
            )
            return int(row["id"])
        values["feedback"] = exp.feedback
        values["pair_hash"] = prepared.pair_hash
        names = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        sql = f"INSERT INTO experiences ({names}) VALUES ({marks})"
        cursor = tx.execute(sql, (*values.values(),))
        return int(cursor.lastrowid or 0)

    @staticmethod
    def _bump(result: Any, tx: Transaction) -> Any:
        """Count a change to the experiences, so every process's cached index goes stale."""
        if result:
            tx.execute(
                "INSERT INTO meta (key, value) VALUES (?, '1') ON CONFLICT (key) "
                "DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)",
                (_REV_KEY,),
            )
        return result

    def _backfill(self) -> None:
        """Compute the retrieval features of rows migrated from schema 1 (once)."""
        rows = self.store.query(f"SELECT {_COLUMNS} FROM experiences WHERE terms IS NULL")
        if not rows:
            return

        def write(tx: Transaction) -> bool:
            for row in rows:
                prepared = self._prepare(_row_to_experience(row))
                exp = _row_to_experience(row)
                sig = exp.signature
                terms = prepared.terms if prepared else encode_terms(exp.title)
                tx.execute(
                    "UPDATE experiences SET terms = ?, dtype = ?, device_name = ?, "
                    "log_numel = ?, op_categories = ? WHERE id = ?",
                    (
                        terms,
                        sig.dtype,
                        sig.device_name,
                        math.log(sig.numel) if sig.numel > 0 else None,
                        _SEP.join(sig.op_categories),
                        exp.id,
                    ),
                )
            return self._bump(True, tx)

        self.store.write(write)

    # reading -------------------------------------------------------------------------------

    def get(self, exp_id: int) -> Experience | None:
        rows = self.store.query(f"SELECT {_COLUMNS} FROM experiences WHERE id = ?", (exp_id,))
        return _row_to_experience(rows[0]) if rows else None

    def list(self, limit: int = 50, offset: int = 0) -> list[Experience]:
        """Newest first."""
        rows = self.store.query(
            f"SELECT {_COLUMNS} FROM experiences ORDER BY created_at DESC, id DESC "
            "LIMIT ? OFFSET ?",
            (limit, offset),
        )
        return [_row_to_experience(row) for row in rows]

    def count(self) -> int:
        return int(self.store.query("SELECT COUNT(*) FROM experiences")[0][0])

    def stats(self) -> dict[str, Any]:
        def read(conn: Any) -> dict[str, Any]:
            total, oldest, newest = conn.execute(
                "SELECT COUNT(*), MIN(created_at), MAX(created_at) FROM experiences"
            ).fetchone()
            result: dict[str, Any] = {"total": total, "oldest": oldest, "newest": newest}
            for column in ("kind", "target", "feedback"):
                rows = conn.execute(
                    f"SELECT {column}, COUNT(*) FROM experiences GROUP BY {column} ORDER BY 1"
                ).fetchall()
                result[f"by_{column}"] = {row[0]: row[1] for row in rows}
            return result

        return self.store.read(read)

    def retrieve(
        self, signature: TaskSignature, query_text: str = "", k: int = 16
    ) -> list[tuple[Experience, float]]:
        """The k entries most similar to a task, best first, with their scores in [0, 1].

        Score = 0.5 * signature similarity + 0.5 * TF-IDF cosine of `query_text` against each
        entry's title, lesson, plan and normalised fast source (weights at the top of this
        module). Equal scores (to 1e-6) go to accepted over unrated over rejected entries,
        then to the newest.
        """
        index = self._current_index()
        if index.size == 0 or k <= 0:
            return []
        scores = index.scores(signature, query_text)
        order = index.rank(scores, np.arange(index.size), k)
        rows = self._fetch([int(index.ids[i]) for i in order])
        return [(rows[int(index.ids[i])], float(scores[i])) for i in order]

    def select_for_prompt(self, signature: TaskSignature, query_text: str = "") -> list[Experience]:
        """The `capacity` experiences for one planner prompt (AccelOpt's policy, retrieved).

        1. Relevant entries (score >= min_relevance) are taken in rank order, positives up
           to floor(capacity * max_positive_share) and negatives up to the rest, so at most
           half are positive while relevant negatives can fill their half.
        2. Free slots go to the remaining relevant entries: a relevant lesson beats an empty
           slot or a random one.
        3. Still short: a random sample (seeded with policy.seed) of the other entries, as
           AccelOpt tops its memory up with older entries.
        Relevant entries come first, best first; the sample follows.
        """
        capacity = self.policy.capacity
        index = self._current_index()
        if index.size == 0:
            return []
        scores = index.scores(signature, query_text)
        relevant = np.nonzero(scores >= self.policy.min_relevance)[0]
        ranked = index.rank(scores, relevant, len(relevant))
        positive_cap = math.floor(capacity * self.policy.max_positive_share)
        chosen: list[int] = []
        skipped: list[int] = []
        positives = negatives = 0
        for row in ranked:
            if len(chosen) >= capacity:
                break
            if index.positive[row]:
                if positives < positive_cap:
                    chosen.append(row)
                    positives += 1
                    continue
            elif negatives < capacity - positive_cap:
                chosen.append(row)
                negatives += 1
                continue
            skipped.append(row)
        chosen.extend(skipped[: capacity - len(chosen)])
        position = {row: i for i, row in enumerate(ranked)}
        chosen.sort(key=position.__getitem__)
        if len(chosen) < capacity:
            free = np.ones(index.size, dtype=bool)
            free[chosen] = False
            rest = np.nonzero(free)[0]
            rng = np.random.default_rng(self.policy.seed)
            sample = rng.permutation(rest)[: capacity - len(chosen)]
            chosen.extend(int(i) for i in sample)
        rows = self._fetch([int(index.ids[i]) for i in chosen])
        return [rows[int(index.ids[i])] for i in chosen]

    def _fetch(self, ids: list[int]) -> dict[int, Experience]:
        if not ids:
            return {}
        marks = ", ".join("?" for _ in ids)
        rows = self.store.query(f"SELECT {_COLUMNS} FROM experiences WHERE id IN ({marks})", ids)
        return {row["id"]: _row_to_experience(row) for row in rows}

    def _current_index(self) -> _Index:
        """The cached index, rebuilt when any process has changed the experiences."""
        with self._index_lock:
            rev = self.store.get_meta(_REV_KEY)
            if self._index is None or self._index.rev != rev:
                self._index = self.store.read(_Index.build)
            return self._index

    # export / import -----------------------------------------------------------------------

    def export_json(self, path: str | os.PathLike[str]) -> int:
        """Write every entry to a schema-versioned JSON file (atomically); returns the count."""
        rows = self.store.query(f"SELECT {_COLUMNS} FROM experiences ORDER BY id")
        payload = {
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "experiences": [_row_to_experience(row).to_json() for row in rows],
        }
        target = Path(path)
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=target.parent, prefix=target.name, delete=False
        ) as handle:
            json.dump(payload, handle, indent=1)
        os.replace(handle.name, target)
        return len(rows)

    def import_json(self, path: str | os.PathLike[str]) -> int:
        """Add the entries of an export file; returns how many were new or improved ones.

        Duplicates (same normalised pair) are skipped unless the imported gain is larger, so
        importing never overwrites a better entry and importing twice adds nothing. The file
        is validated whole before anything is written.
        """
        experiences = read_export(path)
        return sum(1 for written in self.add_many(experiences) if written is not None)


def read_export(path: str | os.PathLike[str]) -> list[Experience]:
    """Parse an export file; any problem is a one-line `MemoryFileError` naming the file."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise MemoryFileError(f"{name}: cannot read: {error}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise MemoryFileError(
            f"{name}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})"
        ) from None
    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise MemoryFileError(f"{name}: not a kernel-agent experiences export")
    version = data.get("version")
    if not isinstance(version, int) or version < 1:
        raise MemoryFileError(f"{name}: missing or invalid 'version'")
    if version > EXPORT_VERSION:
        raise MemoryFileError(
            f"{name}: export version {version} is newer than this kernel-agent reads "
            f"({EXPORT_VERSION})"
        )
    items = data.get("experiences")
    if not isinstance(items, list):
        raise MemoryFileError(f"{name}: 'experiences' is not a list")
    result = []
    for position, item in enumerate(items):
        try:
            result.append(Experience.from_json(item))
        except (ValueError, TypeError) as error:
            raise MemoryFileError(f"{name}: experiences[{position}]: {error}") from None
    return result


@dataclass
class _Prepared:
    exp: Experience
    pair_hash: str
    terms: bytes


@dataclass
class _Index:
    """Everything retrieval needs, as numpy arrays; rebuilt when the revision changes."""

    rev: str | None
    ids: np.ndarray  # int64, one per row
    positive: np.ndarray  # bool
    feedback: np.ndarray  # int8: 2 accepted, 1 none, 0 rejected
    created: np.ndarray  # float64
    categories: dict[str, int]
    cat_matrix: np.ndarray  # float32 rows x categories
    cat_count: np.ndarray  # float32
    log_numel: np.ndarray  # float64, NaN when unknown
    dtype: np.ndarray  # object (str)
    target: np.ndarray
    device: np.ndarray
    text: TfIdf

    @property
    def size(self) -> int:
        return len(self.ids)

    @classmethod
    def build(cls, conn: Any) -> _Index:
        rev_row = conn.execute("SELECT value FROM meta WHERE key = ?", (_REV_KEY,)).fetchone()
        rows = conn.execute(
            "SELECT id, kind, feedback, created_at, target, dtype, device_name, log_numel, "
            "op_categories, terms FROM experiences ORDER BY id"
        ).fetchall()
        n = len(rows)
        categories: dict[str, int] = {}
        cat_rows: list[int] = []
        cat_cols: list[int] = []
        for i, row in enumerate(rows):
            for cat in filter(None, (row["op_categories"] or "").split(_SEP)):
                cat_rows.append(i)
                cat_cols.append(categories.setdefault(cat, len(categories)))
        matrix = np.zeros((n, max(1, len(categories))), dtype=np.float32)
        matrix[cat_rows, cat_cols] = 1.0
        return cls(
            rev=rev_row[0] if rev_row else None,
            ids=np.fromiter((row["id"] for row in rows), dtype=np.int64, count=n),
            positive=np.fromiter((row["kind"] == "positive" for row in rows), bool, count=n),
            feedback=np.fromiter(
                (_FEEDBACK_RANK.get(row["feedback"], 1) for row in rows), np.int8, count=n
            ),
            created=np.fromiter((row["created_at"] for row in rows), np.float64, count=n),
            categories=categories,
            cat_matrix=matrix,
            cat_count=matrix.sum(axis=1),
            log_numel=np.array(
                [math.nan if row["log_numel"] is None else row["log_numel"] for row in rows],
                dtype=np.float64,
            ),
            dtype=np.array([row["dtype"] for row in rows], dtype=object),
            target=np.array([row["target"] for row in rows], dtype=object),
            device=np.array([row["device_name"] for row in rows], dtype=object),
            text=TfIdf.build([row["terms"] or b"" for row in rows]),
        )

    def scores(self, signature: TaskSignature, query_text: str) -> np.ndarray:
        """Retrieval score of every row (see ExperienceStore.retrieve)."""
        query_cats = [self.categories[c] for c in signature.op_categories if c in self.categories]
        inter = self.cat_matrix[:, query_cats].sum(axis=1) if query_cats else 0.0
        union = self.cat_count + len(signature.op_categories) - inter
        with np.errstate(divide="ignore", invalid="ignore"):
            jaccard = np.where(union > 0, inter / np.maximum(union, 1), 0.0)
        numel = signature.numel
        if numel > 0:
            distance = np.abs(self.log_numel - math.log(numel))
            shape = np.nan_to_num(np.clip(1 - distance / _SHAPE_SPAN, 0, 1), nan=0.0)
        else:
            shape = np.zeros(self.size)
        sig = (
            W_OPS * jaccard
            + W_SHAPE * shape
            + W_TARGET * _equal(self.target, signature.target)
            + W_DTYPE * _equal(self.dtype, signature.dtype)
            + W_DEVICE * _equal(self.device, signature.device_name)
        )
        text = self.text.cosine(query_text) if query_text else 0.0
        return SIGNATURE_WEIGHT * sig + TEXT_WEIGHT * text

    def rank(self, scores: np.ndarray, rows: np.ndarray, k: int) -> list[int]:
        """The best k of `rows`: score (to 1e-6), then feedback, then newest, then id."""
        if len(rows) == 0 or k <= 0:
            return []
        rounded = np.round(scores[rows], 6)
        if k < len(rows):
            threshold = np.partition(rounded, len(rows) - k)[len(rows) - k]
            keep = rounded >= threshold
            rows, rounded = rows[keep], rounded[keep]
        order = np.lexsort((-self.ids[rows], -self.created[rows], -self.feedback[rows], -rounded))
        return [int(r) for r in rows[order][:k]]


def _equal(values: np.ndarray, wanted: str) -> np.ndarray:
    if not wanted:
        return np.zeros(len(values))
    return (values == wanted).astype(np.float64)


# --- text similarity: TF-IDF over hashed tokens ------------------------------------------------

BUCKETS = 2**16  # hashed vocabulary; a bucket id fits the uint16 stored in `terms`
_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    {"the", "and", "for", "with", "into", "from", "that", "this", "then", "than", "are"}
    | {"was", "were", "not", "but", "its", "use", "using", "self", "def", "return", "import"}
    | {"torch", "nn", "none", "true", "false", "class"}
)


def _words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in _STOPWORDS]


def _buckets(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Unique hashed buckets of the text's words (crc32: stable across processes), counts."""
    words = _words(text)
    hashed = np.fromiter((zlib.crc32(w.encode()) for w in words), np.uint32, count=len(words))
    return np.unique((hashed & (BUCKETS - 1)).astype(np.uint16), return_counts=True)


def encode_terms(text: str) -> bytes:
    """A document's term counts as stored: little-endian uint16 (bucket, count) pairs."""
    buckets, counts = _buckets(text)
    pairs = np.stack([buckets, np.minimum(counts, 65535)], axis=1).astype("<u2")
    return pairs.tobytes()


@dataclass
class TfIdf:
    """An inverted index: per bucket, the rows holding it and their L2-normalised weights.

    Weights are sublinear tf (1 + ln tf) times smoothed idf (ln((1 + n) / (1 + df)) + 1).
    A query costs one gather over its buckets' postings and one bincount.
    """

    n: int
    df: np.ndarray  # int64 per bucket
    idf: np.ndarray  # float64 per bucket
    indptr: np.ndarray  # int64, BUCKETS + 1
    docs: np.ndarray  # int32 postings, grouped by bucket
    weights: np.ndarray  # float32 postings

    @classmethod
    def build(cls, blobs: list[bytes]) -> TfIdf:
        n = len(blobs)
        arrays = [np.frombuffer(blob, dtype="<u2") for blob in blobs]
        lengths = np.fromiter((len(a) // 2 for a in arrays), np.int64, count=n)
        pairs = np.concatenate(arrays).reshape(-1, 2) if n else np.zeros((0, 2), "<u2")
        buckets = pairs[:, 0].astype(np.int64)
        counts = pairs[:, 1].astype(np.float64)
        doc = np.repeat(np.arange(n, dtype=np.int32), lengths)
        df = np.bincount(buckets, minlength=BUCKETS)
        idf = np.log((1 + n) / (1 + df)) + 1
        weights = (1 + np.log(np.maximum(counts, 1))) * idf[buckets]
        norms = np.sqrt(np.bincount(doc, weights * weights, minlength=n))
        weights = weights / np.maximum(norms, 1e-12)[doc]
        order = np.argsort(buckets, kind="stable")
        indptr = np.concatenate([[0], np.cumsum(df)]).astype(np.int64)
        return cls(n, df, idf, indptr, doc[order], weights[order].astype(np.float32))

    def cosine(self, query_text: str) -> np.ndarray:
        """Cosine similarity of the query to every row (query words absent everywhere are
        left out of its norm, so scores do not shrink with unknown words)."""
        buckets, counts = _buckets(query_text)
        buckets = buckets.astype(np.int64)
        present = self.df[buckets] > 0
        buckets, counts = buckets[present], counts[present]
        if self.n == 0 or len(buckets) == 0:
            return np.zeros(self.n)
        query = (1 + np.log(counts)) * self.idf[buckets]
        query /= np.linalg.norm(query)
        starts = self.indptr[buckets]
        lengths = self.indptr[buckets + 1] - starts
        offsets = np.cumsum(lengths) - lengths
        positions = np.arange(lengths.sum()) - np.repeat(offsets - starts, lengths)
        contributions = self.weights[positions] * np.repeat(query, lengths)
        return np.bincount(self.docs[positions], contributions, minlength=self.n)
