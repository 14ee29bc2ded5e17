"""KernelSkill's short-term memory: every attempt on a task, as a tree, kept on disk.

The logbook answers the questions that stop a search from wasting its budget: was this code
(or this plan, reworded) already tried, which plans failed, which kernel is the best so far,
and where does an interrupted job pick up again.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from typing import Any

from memory.normalize import normalized_source
from memory.normalize import source_hash as hash_source
from memory.store import MemoryStore, Transaction, scrub

CORRECT = "correct"  # agents.verify.verdict.Verdict.CORRECT
ERROR_DIGEST_CHARS = 300
PLAN_SIMILARITY = 0.85
_PLAN_WORD = re.compile(r"[a-z]+|[0-9]+")
_PLAN_STOPWORDS = frozenset(
    {"a", "an", "the", "and", "or", "of", "to", "in", "on", "for", "with", "by", "via", "as"}
    | {"at", "it", "its", "this", "that", "then", "from", "is", "are", "be", "so", "we", "our"}
    | {"use", "using", "instead", "each", "all"}
)
_SUFFIXES = ("ing", "ed", "es", "s", "e")


@dataclass(frozen=True)
class Attempt:
    """One candidate tried on a task. `speedup` is over the task's reference, when measured."""

    id: int
    task_id: str
    parent_id: int | None
    plan: str
    skills: tuple[str, ...]
    source_hash: str
    verdict: str
    speedup: float | None
    error_digest: str
    created_at: float
    depth: int = 0  # 0 for a root, parent's depth + 1 otherwise

    @property
    def correct(self) -> bool:
        return self.verdict == CORRECT


def task_id_for(reference_source: str, device_name: str) -> str:
    """A task is a reference program on a device; cosmetic edits keep the same task."""
    text = normalized_source(reference_source) + "\x00" + device_name
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def plan_key(plan: str) -> str:
    """A plan's words, normalised for paraphrase matching: lowercase, punctuation dropped,
    letters and digits split apart, stopwords removed, crude suffix stripping ("fused",
    "fusing", "fuses" -> "fus"), then sorted and unique. Numbers stay as words, because
    "tile 64" and "tile 128" are different experiments."""
    words = {_stem(w) for w in _PLAN_WORD.findall(plan.lower())} - _PLAN_STOPWORDS
    return " ".join(sorted(w for w in words if w))


def plan_similarity(key_a: str, key_b: str) -> float:
    """Jaccard similarity of two plan keys' word sets (1.0 when both are empty)."""
    a, b = set(key_a.split()), set(key_b.split())
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def _plan_head(plan: str) -> str:
    """A plan's first line: its title and method, without the details."""
    return plan.strip().split("\n", 1)[0].strip()


def _stem(word: str) -> str:
    if word in _PLAN_STOPWORDS or word.isdigit():
        return word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) > len(suffix) + 2 and not word.endswith("ss"):
            return word[: -len(suffix)]
    return word


_COLUMNS = (
    "id, task_id, parent_id, plan, skills, source_hash, verdict, speedup, error_digest, "
    "created_at, depth"
)


def _attempt(row: Any) -> Attempt:
    return Attempt(
        id=row["id"],
        task_id=row["task_id"],
        parent_id=row["parent_id"],
        plan=row["plan"],
        skills=tuple(json.loads(row["skills"])),
        source_hash=row["source_hash"],
        verdict=row["verdict"],
        speedup=row["speedup"],
        error_digest=row["error_digest"],
        created_at=row["created_at"],
        depth=row["depth"],
    )


class Logbook:
    """The attempt trees of all tasks, in the shared memory store."""

    def __init__(self, store: MemoryStore):
        self.store = store

    def record(
        self,
        task_id: str,
        *,
        verdict: str,
        source: str | None = None,
        plan: str = "",
        parent_id: int | None = None,
        skills: tuple[str, ...] | list[str] = (),
        speedup: float | None = None,
        error: str = "",
        source_hash: str | None = None,
        created_at: float | None = None,
    ) -> Attempt:
        """Log one attempt. The source itself is kept only for correct attempts (a resumed
        job needs the beam's code; failed code is remembered by its hash alone)."""
        if source is None and source_hash is None:
            raise ValueError("record needs the attempt's source or its source hash")
        clean_source = scrub(source) if source is not None else None
        digest = source_hash or hash_source(clean_source or "")
        clean_plan = scrub(plan)
        error_digest = scrub(error).strip()[:ERROR_DIGEST_CHARS]
        stamp = time.time() if created_at is None else created_at

        def write(tx: Transaction) -> Attempt:
            depth = 0
            if parent_id is not None:
                parent = tx.execute(
                    "SELECT task_id, depth FROM attempts WHERE id = ?", (parent_id,)
                ).fetchone()
                if parent is None or parent["task_id"] != task_id:
                    raise ValueError(f"attempt {parent_id} is not an attempt of task {task_id}")
                depth = parent["depth"] + 1
            cursor = tx.execute(
                "INSERT INTO attempts (task_id, parent_id, depth, verdict, speedup, created_at, "
                "source_hash, plan_key, skills, plan, error_digest, source) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    task_id,
                    parent_id,
                    depth,
                    verdict,
                    speedup,
                    stamp,
                    digest,
                    plan_key(clean_plan),
                    json.dumps([scrub(s) for s in skills]),
                    clean_plan,
                    error_digest,
                    clean_source if verdict == CORRECT else None,
                ),
            )
            return Attempt(
                id=int(cursor.lastrowid or 0),
                task_id=task_id,
                parent_id=parent_id,
                plan=clean_plan,
                skills=tuple(scrub(s) for s in skills),
                source_hash=digest,
                verdict=verdict,
                speedup=speedup,
                error_digest=error_digest,
                created_at=stamp,
                depth=depth,
            )

        return self.store.write(write)

    def get(self, attempt_id: int) -> Attempt | None:
        rows = self.store.query(f"SELECT {_COLUMNS} FROM attempts WHERE id = ?", (attempt_id,))
        return _attempt(rows[0]) if rows else None

    def source(self, attempt_id: int) -> str | None:
        """The code of a correct attempt (None for failed ones: only their hash is kept)."""
        rows = self.store.query("SELECT source FROM attempts WHERE id = ?", (attempt_id,))
        return rows[0]["source"] if rows else None

    def attempts(self, task_id: str) -> list[Attempt]:
        """All attempts of a task, oldest first."""
        rows = self.store.query(
            f"SELECT {_COLUMNS} FROM attempts WHERE task_id = ? ORDER BY id", (task_id,)
        )
        return [_attempt(row) for row in rows]

    def children(self, attempt_id: int) -> list[Attempt]:
        rows = self.store.query(
            f"SELECT {_COLUMNS} FROM attempts WHERE parent_id = ? ORDER BY id", (attempt_id,)
        )
        return [_attempt(row) for row in rows]

    def best(self, task_id: str) -> Attempt | None:
        """The fastest correct attempt (the earliest among equals)."""
        rows = self.store.query(
            f"SELECT {_COLUMNS} FROM attempts WHERE task_id = ? AND verdict = ? "
            "AND speedup IS NOT NULL ORDER BY speedup DESC, id LIMIT 1",
            (task_id, CORRECT),
        )
        return _attempt(rows[0]) if rows else None

    def was_tried(
        self, task_id: str, source: str | None = None, plan: str | None = None
    ) -> Attempt | None:
        """The earliest attempt equivalent to this code or this plan, else None.

        Code matches on the normalised source hash (comments, docstrings and whitespace do
        not count). A plan matches when its `plan_key` equals a tried plan's or their word
        sets have Jaccard similarity >= 0.85, so a reworded plan counts as tried.
        """
        if source is not None:
            rows = self.store.query(
                f"SELECT {_COLUMNS} FROM attempts WHERE task_id = ? AND source_hash = ? "
                "ORDER BY id LIMIT 1",
                (task_id, hash_source(scrub(source))),
            )
            if rows:
                return _attempt(rows[0])
        if plan is not None and plan.strip():
            key = plan_key(scrub(plan))
            rows = self.store.query(
                f"SELECT {_COLUMNS}, plan_key FROM attempts WHERE task_id = ? AND plan_key != '' "
                "ORDER BY id",
                (task_id,),
            )
            for row in rows:
                if row["plan_key"] == key or plan_similarity(row["plan_key"], key) >= (
                    PLAN_SIMILARITY
                ):
                    return _attempt(row)
        return None

    def failed_plans(self, task_id: str) -> list[str]:
        """Plans that did not pay: the attempt was not correct, or was correct but no faster
        than its parent, and no other attempt with the same plan paid (a plan that failed
        once and then, repaired, succeeded is not a failed plan). The same plan is the same
        first line (title and method): the details may differ between runs, as a planner's
        memory note does, and a plan that paid on this task must never be hidden because it
        found nothing on another kernel of it. Unique, oldest first; for the planner's "do
        not repeat" list."""
        attempts = self.attempts(task_id)
        by_id = {a.id: a for a in attempts}
        failed: list[str] = []
        paid = {
            _plan_head(a.plan)
            for a in attempts
            if a.correct
            and a.plan
            and (
                a.parent_id is None
                or by_id.get(a.parent_id) is None
                or by_id[a.parent_id].speedup is None
                or (a.speedup or 0) > (by_id[a.parent_id].speedup or 0)
            )
        }
        for attempt in attempts:
            if _plan_head(attempt.plan) in paid:
                continue
            parent = by_id.get(attempt.parent_id) if attempt.parent_id is not None else None
            slower = (
                attempt.correct
                and parent is not None
                and attempt.speedup is not None
                and parent.speedup is not None
                and attempt.speedup <= parent.speedup
            )
            if (not attempt.correct or slower) and attempt.plan and attempt.plan not in failed:
                failed.append(attempt.plan)
        return failed

    def resume_point(self, task_id: str, beam_width: int = 6) -> list[Attempt]:
        """The current beam: the `beam_width` fastest correct attempts, fastest first.

        AccelOpt keeps, each iteration, the top B by latency of the old beam plus the new
        kernels; by induction that is the top B correct kernels ever measured on the task,
        which is what this returns (an interrupted iteration's finished kernels count too).
        To resume, a job needs these attempts and their code (`source(id)`), the plans to
        avoid (`failed_plans`, `was_tried`) and the next depth (max depth here + 1).
        KernelSkill's single chain is beam_width=1. Empty: restart from the reference.
        """
        rows = self.store.query(
            f"SELECT {_COLUMNS} FROM attempts WHERE task_id = ? AND verdict = ? "
            "ORDER BY speedup IS NULL, speedup DESC, id LIMIT ?",
            (task_id, CORRECT, beam_width),
        )
        return [_attempt(row) for row in rows]

    def tasks(self) -> list[str]:
        """Task ids, most recently attempted first."""
        rows = self.store.query(
            "SELECT task_id, MAX(id) AS last FROM attempts GROUP BY task_id ORDER BY last DESC"
        )
        return [row["task_id"] for row in rows]
