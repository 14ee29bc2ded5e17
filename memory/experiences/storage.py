"""The optimization memory's storage: experiences as rows of the shared SQLite store.

AccelOpt keeps the memory per task; here it lives in the shared store and the planner gets
the entries most similar to its task (`retrieve`, `select_for_prompt`), so a lesson learnt on
one GEMM+ReLU helps the next one. Writes deduplicate on the normalised (slow, fast) pair and
bump a revision, so every process's cached retrieval index knows when it is stale.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from dataclasses import dataclass
from typing import Any

from memory.experiences.export import read_export, write_export
from memory.experiences.lessons import (
    FEEDBACK,
    Experience,
    Kind,
    MemoryPolicy,
    TaskSignature,
    gain_of,
)
from memory.experiences.retrieval import (
    CATEGORY_SEPARATOR,
    REVISION_KEY,
    RetrievalIndex,
    chosen_for_prompt,
    ranked_for_task,
)
from memory.experiences.text_index import encode_terms
from memory.normalize import normalized_source
from memory.store import MemoryStore, Transaction, scrub


@dataclass
class _Prepared:
    exp: Experience
    pair_hash: str
    terms: bytes


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
        self._index: RetrievalIndex | None = None
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
            "op_categories": CATEGORY_SEPARATOR.join(sig.op_categories),
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
            if exp.gain <= gain_of(row["speedup"], row["kind"]):
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
                (REVISION_KEY,),
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
                        CATEGORY_SEPARATOR.join(sig.op_categories),
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
        entry's title, lesson, plan and normalised fast source (weights in `retrieval`).
        Equal scores (to 1e-6) go to accepted over unrated over rejected entries, then to the
        newest.
        """
        index = self._current_index()
        ranked = ranked_for_task(index, signature, query_text, k)
        rows = self._fetch([int(index.ids[row]) for row, _ in ranked])
        return [(rows[int(index.ids[row])], score) for row, score in ranked]

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
        index = self._current_index()
        chosen = chosen_for_prompt(index, signature, query_text, self.policy)
        rows = self._fetch([int(index.ids[i]) for i in chosen])
        return [rows[int(index.ids[i])] for i in chosen]

    def _fetch(self, ids: list[int]) -> dict[int, Experience]:
        if not ids:
            return {}
        marks = ", ".join("?" for _ in ids)
        rows = self.store.query(f"SELECT {_COLUMNS} FROM experiences WHERE id IN ({marks})", ids)
        return {row["id"]: _row_to_experience(row) for row in rows}

    def _current_index(self) -> RetrievalIndex:
        """The cached index, rebuilt when any process has changed the experiences."""
        with self._index_lock:
            rev = self.store.get_meta(REVISION_KEY)
            if self._index is None or self._index.rev != rev:
                self._index = self.store.read(RetrievalIndex.build)
            return self._index

    # export / import -----------------------------------------------------------------------

    def export_json(self, path: str | os.PathLike[str]) -> int:
        """Write every entry to a schema-versioned JSON file (atomically); returns the count."""
        rows = self.store.query(f"SELECT {_COLUMNS} FROM experiences ORDER BY id")
        return write_export(path, [_row_to_experience(row) for row in rows])

    def import_json(self, path: str | os.PathLike[str]) -> int:
        """Add the entries of an export file; returns how many were new or improved ones.

        Duplicates (same normalised pair) are skipped unless the imported gain is larger, so
        importing never overwrites a better entry and importing twice adds nothing. The file
        is validated whole before anything is written.
        """
        experiences = read_export(path)
        return sum(1 for written in self.add_many(experiences) if written is not None)
