"""Finding the experiences most similar to a task: scores, ranking and a prompt's share.

Retrieval score = SIGNATURE_WEIGHT * signature similarity + TEXT_WEIGHT * text similarity,
both in [0, 1]. Everything it reads is kept in numpy arrays (`RetrievalIndex`), rebuilt only
when some process has changed the experiences (the revision under REVISION_KEY), so a
planner's lookup costs a few vector operations, not a scan of the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from memory.experiences.lessons import MemoryPolicy, TaskSignature
from memory.experiences.text_index import TfIdf

REVISION_KEY = "experiences_rev"
"""The meta key counting changes to the experiences; every cached index compares it."""
CATEGORY_SEPARATOR = "\x1f"
"""Joins a row's op categories in its `op_categories` column."""

# Signature similarity is the weighted sum below (weights add up to 1).
SIGNATURE_WEIGHT = 0.5
TEXT_WEIGHT = 0.5
W_OPS = 0.35  # Jaccard of the op categories: what the kernel computes matters most
W_TARGET = 0.25  # a CUDA lesson rarely transfers to a Triton or torch rewrite
W_SHAPE = 0.20  # 1 - |ln(numel ratio)| / ln(1000), floored at 0: 10x apart gives 0.67
W_DTYPE = 0.10
W_DEVICE = 0.10
_SHAPE_SPAN = math.log(1000.0)
_FEEDBACK_RANK = {"accepted": 2, "none": 1, "rejected": 0}


@dataclass
class RetrievalIndex:
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
    def build(cls, conn: Any) -> RetrievalIndex:
        rev_row = conn.execute("SELECT value FROM meta WHERE key = ?", (REVISION_KEY,)).fetchone()
        rows = conn.execute(
            "SELECT id, kind, feedback, created_at, target, dtype, device_name, log_numel, "
            "op_categories, terms FROM experiences ORDER BY id"
        ).fetchall()
        n = len(rows)
        categories: dict[str, int] = {}
        cat_rows: list[int] = []
        cat_cols: list[int] = []
        for i, row in enumerate(rows):
            for cat in filter(None, (row["op_categories"] or "").split(CATEGORY_SEPARATOR)):
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


def ranked_for_task(
    index: RetrievalIndex, signature: TaskSignature, query_text: str, k: int
) -> list[tuple[int, float]]:
    """The k rows most similar to a task, best first, each with its score."""
    if index.size == 0 or k <= 0:
        return []
    scores = index.scores(signature, query_text)
    return [(row, float(scores[row])) for row in index.rank(scores, np.arange(index.size), k)]


def chosen_for_prompt(
    index: RetrievalIndex, signature: TaskSignature, query_text: str, policy: MemoryPolicy
) -> list[int]:
    """The rows of one planner prompt (AccelOpt's policy; see ExperienceStore.select_for_prompt)."""
    if index.size == 0:
        return []
    capacity = policy.capacity
    scores = index.scores(signature, query_text)
    relevant = np.nonzero(scores >= policy.min_relevance)[0]
    ranked = index.rank(scores, relevant, len(relevant))
    positive_cap = math.floor(capacity * policy.max_positive_share)
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
        rng = np.random.default_rng(policy.seed)
        sample = rng.permutation(rest)[: capacity - len(chosen)]
        chosen.extend(int(i) for i in sample)
    return chosen
