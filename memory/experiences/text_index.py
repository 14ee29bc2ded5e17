"""Text similarity for retrieval: TF-IDF over hashed tokens.

A document's term counts are stored with its row (`encode_terms`), so building the index
for thousands of entries reads blobs instead of re-tokenising every source.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

import numpy as np

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
