"""The optimization memory: AccelOpt's thresholds and caps, near-duplicates, retrieval,
prompt selection, export/import. Every test goes through a real SQLite file."""

from __future__ import annotations

import json
import random

import pytest

from memory.experiences import (
    Experience,
    ExperienceStore,
    MemoryFileError,
    MemoryPolicy,
    TaskSignature,
    from_attempt,
)
from memory.normalize import normalized_source, source_hash
from memory.store import MemoryStore

GEMM = TaskSignature(("gemm", "pointwise"), ((512, 1024), (1024,)), "float32", "cuda", "H200")
OTHER = TaskSignature(("softmax",), ((8, 8),), "float16", "triton", "A100")


@pytest.fixture
def store(tmp_path):
    with MemoryStore(tmp_path / "memory.sqlite3") as store:
        yield store


@pytest.fixture
def memory(store):
    return ExperienceStore(store)


def exp(i: int = 0, speedup: float = 1.5, signature: TaskSignature = GEMM, **text) -> Experience:
    return Experience(
        signature=signature,
        slow_source=f"def f(x):\n    return slow_{i}(x)\n",
        fast_source=f"def f(x):\n    return fast_{i}(x)\n",
        speedup=speedup,
        **text,
    )


# --- thresholds and pairs --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("speedup", "kind"),
    [
        (1.5, "positive"),
        (1.0401, "positive"),
        (1.04, None),
        (1.0, None),
        (1 / 1.15, None),
        (0.8695, "negative"),
        (0.5, "negative"),
    ],
)
def test_accelopt_thresholds_classify_speedups(memory, speedup, kind):
    assert memory.classify(speedup) == kind


def test_thresholds_are_configurable(store):
    strict = ExperienceStore(store, MemoryPolicy(positive_threshold=1.2, negative_threshold=0.5))
    assert strict.classify(1.1) is None
    assert strict.classify(0.6) is None
    assert strict.classify(1.3) == "positive"


def test_neutral_speedups_are_not_stored(memory):
    assert memory.add(exp(speedup=1.02)) is None
    assert memory.add(exp(speedup=0.9)) is None
    assert memory.count() == 0


def test_a_slower_candidate_is_stored_as_a_swapped_pair(memory):
    parent, candidate = "y = parent(x)", "y = candidate(x)"
    negative = from_attempt(MemoryPolicy(), GEMM, parent, candidate, 0.5, plan="unroll by 8")
    assert negative is not None and negative.kind == "negative"
    assert (negative.slow_source, negative.fast_source) == (candidate, parent)
    assert negative.gain == pytest.approx(2.0)
    stored = memory.get(memory.add(negative))
    assert (stored.slow_source, stored.fast_source, stored.kind) == (candidate, parent, "negative")
    assert "2.00x slower" in stored.summary()
    positive = from_attempt(MemoryPolicy(), GEMM, parent, candidate, 1.3)
    assert (positive.slow_source, positive.fast_source) == (parent, candidate)
    assert from_attempt(MemoryPolicy(), GEMM, parent, candidate, 1.01) is None


# --- near-duplicates -------------------------------------------------------------------------


def test_the_same_code_with_other_comments_is_one_entry_keeping_the_larger_speedup(memory):
    plain = Experience(
        signature=GEMM,
        slow_source="def f(x):\n    return g(x) + 1\n",
        fast_source="def f(x):\n    return g(x).add_(1)\n",
        speedup=1.3,
        title="first",
    )
    commented = Experience(
        signature=GEMM,
        slow_source='def f(x):\n    """Doc."""\n    # slow\n    return g(x)  +  1\n\n',
        fast_source="def f(x):  # fast\n    return g( x ).add_(1)   \n",
        speedup=1.6,
        title="second",
    )
    first = memory.add(plain)
    assert memory.add(commented) == first
    assert memory.count() == 1
    assert (memory.get(first).speedup, memory.get(first).title) == (1.6, "second")
    assert memory.add(plain) is None  # smaller: skipped
    assert memory.get(first).speedup == 1.6


CUDA_A = """
import torch
from torch.utils.cpp_extension import load_inline

SOURCE = r\"\"\"
// scale by two
__global__ void twice(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  /* one thread per element */
    if (i < n) y[i] = 2.0f * x[i];
}
\"\"\"
"""
CUDA_B = """import torch
from torch.utils.cpp_extension import load_inline
SOURCE = r\"\"\"
__global__ void twice(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];   // same
}\"\"\"
"""


def test_sources_that_differ_only_cosmetically_hash_equal():
    assert source_hash(CUDA_A) == source_hash(CUDA_B)
    assert source_hash(CUDA_A) != source_hash(CUDA_A.replace("2.0f", "3.0f"))
    wrapped = "y = f(a,\n      b)  # call\n"
    assert source_hash(wrapped) == source_hash('"""Doc."""\ny = f( a, b )\n')
    not_python = "int main() {\n    return 0;   \n\n}\n"
    assert normalized_source(not_python) == "int main() {\nreturn 0;\n}"


def test_a_duplicate_negative_is_replaced_by_a_stronger_slowdown(memory):
    first = memory.add(exp(1, speedup=0.8))
    assert memory.add(exp(1, speedup=0.85)) is None
    assert memory.add(exp(1, speedup=0.5)) == first
    assert memory.get(first).speedup == 0.5


# --- per-iteration cap -----------------------------------------------------------------------


def test_an_iteration_adds_at_most_eight_and_at_most_half_positive(memory):
    positives = [exp(i, speedup=1.1 + i / 10) for i in range(10)]
    negatives = [exp(100 + i, speedup=0.8 - i / 100) for i in range(10)]
    neutral = [exp(200, speedup=1.0)]
    ids = memory.add_iteration(positives + negatives + neutral)
    stored = [memory.get(i) for i in ids]
    assert len(ids) == 8
    kept_positive = sorted(e.speedup for e in stored if e.kind == "positive")
    kept_negative = sorted(e.speedup for e in stored if e.kind == "negative")
    assert kept_positive == pytest.approx([1.7, 1.8, 1.9, 2.0])  # the strongest four
    assert kept_negative == pytest.approx([0.71, 0.72, 0.73, 0.74])


def test_an_iteration_with_few_negatives_leaves_positives_capped(memory):
    ids = memory.add_iteration([exp(i, speedup=1.5) for i in range(10)] + [exp(50, speedup=0.5)])
    kinds = [memory.get(i).kind for i in ids]
    assert kinds.count("positive") == 4 and kinds.count("negative") == 1


def test_a_skipped_duplicate_does_not_use_an_iteration_slot(memory):
    memory.add(exp(0, speedup=3.0))
    ids = memory.add_iteration([exp(i, speedup=2.0) for i in range(6)])
    assert len(ids) == 4 and memory.count() == 5


# --- CRUD and stats --------------------------------------------------------------------------


def test_list_forget_feedback_and_stats(memory):
    ids = [memory.add(exp(i, created_at=1000.0 + i)) for i in range(5)]
    memory.add(exp(9, speedup=0.5, signature=OTHER, created_at=999.0))
    assert [e.id for e in memory.list(limit=3)] == ids[::-1][:3]
    assert [e.id for e in memory.list(limit=2, offset=4)] == [ids[0], ids[0] + 5]
    assert memory.set_feedback(ids[0], accepted=True)
    assert memory.set_feedback(ids[1], accepted=False)
    assert not memory.set_feedback(12345, accepted=True)
    assert memory.forget(ids[2]) and not memory.forget(ids[2])
    assert memory.get(ids[2]) is None
    stats = memory.stats()
    assert stats["total"] == 5
    assert stats["by_kind"] == {"negative": 1, "positive": 4}
    assert stats["by_target"] == {"cuda": 4, "triton": 1}
    assert stats["by_feedback"] == {"accepted": 1, "none": 3, "rejected": 1}
    assert (stats["oldest"], stats["newest"]) == (999.0, 1004.0)


# --- retrieval -------------------------------------------------------------------------------

CATEGORIES = ["conv", "reduction", "norm", "softmax", "pool", "scan", "gather", "attention"]
WORDS = [
    *("vectorize", "loads", "coalesce", "stores", "warp", "shuffle", "reduce", "registers"),
    *("occupancy", "launch", "bounds", "shared", "memory", "bank", "conflicts", "tensor"),
    *("cores", "wmma", "pipeline", "async", "copy", "prefetch", "im2col", "winograd", "online"),
    *("softmax", "welford", "variance", "layernorm", "persistent", "kernel", "grid", "stride"),
    *("split", "reduction", "atomics", "transpose", "padding", "swizzle", "cache", "blocking"),
]


def _distractors(rng: random.Random, n: int) -> list[Experience]:
    out = []
    for i in range(n):
        hard = i % 10 == 0  # every tenth shares the op category and target, not the text
        cats = ("gemm",) if hard else tuple(rng.sample(CATEGORIES, rng.randint(1, 3)))
        shape = (rng.choice([8, 64, 4096]), rng.choice([16, 256, 8192]))
        signature = TaskSignature(
            cats,
            (shape,),
            rng.choice(["float16", "bfloat16", "float32"]),
            "cuda" if hard else rng.choice(["torch", "triton", "cpu-cpp", "cuda"]),
            rng.choice(["A100", "H200", "cpu"]),
        )
        lesson = " ".join(rng.choices(WORDS, k=14))
        out.append(
            Experience(
                signature=signature,
                slow_source=f"def f(x):\n    return slow_{i}(x)\n",
                fast_source=f"def f(x):\n    return {rng.choice(WORDS)}_{i}(x)\n",
                speedup=rng.choice([1.2, 1.5, 2.0, 0.5]),
                title=" ".join(rng.choices(WORDS, k=4)),
                lesson=lesson,
                plan=" ".join(rng.choices(WORDS, k=8)),
                created_at=1000.0 + i,
            )
        )
    return out


PLANTED = Experience(
    signature=GEMM,
    slow_source="def f(x, w, b):\n    return torch.relu(x @ w + b)\n",
    fast_source="def f(x, w, b):\n    return torch.addmm(b, x, w).relu_()\n",
    speedup=1.4,
    title="Fuse bias add and ReLU into the GEMM epilogue",
    lesson="addmm applies the bias in the GEMM epilogue; an in-place relu saves another pass",
    plan="replace matmul + bias + relu with addmm and relu_",
    created_at=500.0,  # the oldest: recency does not carry it
)


def test_a_planted_relevant_experience_ranks_first_among_200_distractors(memory):
    rng = random.Random(7)
    distractors = _distractors(rng, 200)
    memory.add_many(distractors[:120])
    planted = memory.add(PLANTED)
    memory.add_many(distractors[120:])
    assert memory.count() == 201

    query = "bias and relu after a gemm: fuse them into the epilogue"
    results = memory.retrieve(GEMM, query, k=5)
    assert results[0][0].id == planted
    assert results[0][1] > results[1][1]
    scores = [score for _, score in results]
    assert scores == sorted(scores, reverse=True)
    # Each half of the score alone still finds it.
    assert memory.retrieve(GEMM, "", k=1)[0][0].id == planted
    assert memory.retrieve(TaskSignature(target=""), "relu bias epilogue", k=1)[0][0].id == planted


def test_equal_scores_prefer_accepted_then_unrated_then_rejected_then_newest(memory):
    same = {"title": "same", "lesson": "same lesson"}
    older = memory.add(exp(1, created_at=100.0, **same))
    rejected = memory.add(exp(2, created_at=400.0, **same))
    newer = memory.add(exp(3, created_at=200.0, **same))
    accepted = memory.add(exp(4, created_at=50.0, **same))
    memory.set_feedback(accepted, accepted=True)
    memory.set_feedback(rejected, accepted=False)
    ranked = [e.id for e, _ in memory.retrieve(GEMM, "same lesson", k=4)]
    assert ranked == [accepted, newer, older, rejected]


def test_the_cached_index_sees_writes_from_this_and_other_connections(memory, store, tmp_path):
    memory.add(exp(1, title="tile the gemm", lesson="shared memory tiles"))
    assert memory.retrieve(GEMM, "vectorized float4 loads", k=1)[0][0].title == "tile the gemm"
    new = memory.add(exp(2, title="vectorized float4 loads", lesson="float4 halves instructions"))
    assert memory.retrieve(GEMM, "vectorized float4 loads", k=1)[0][0].id == new
    with MemoryStore(store.path) as other:
        third = ExperienceStore(other).add(exp(3, title="float4 vectorized loads everywhere"))
    assert memory.retrieve(GEMM, "float4 vectorized loads everywhere", k=1)[0][0].id == third
    memory.forget(third)
    assert third not in [e.id for e, _ in memory.retrieve(GEMM, "float4", k=5)]


def test_an_empty_memory_retrieves_nothing(memory):
    assert memory.retrieve(GEMM, "anything", k=16) == []
    assert memory.select_for_prompt(GEMM, "anything") == []


# --- prompt selection ------------------------------------------------------------------------


def test_a_prompt_gets_capacity_entries_at_most_half_positive(memory):
    memory.add_many([exp(i, speedup=1.5, lesson="epilogue fusion") for i in range(20)])
    memory.add_many([exp(100 + i, speedup=0.5, lesson="epilogue fusion") for i in range(20)])
    chosen = memory.select_for_prompt(GEMM, "epilogue fusion")
    assert len(chosen) == 16
    assert sum(e.kind == "positive" for e in chosen) == 8


def test_a_prompt_gives_free_negative_slots_to_relevant_positives(memory):
    memory.add_many([exp(i, speedup=1.5, lesson="epilogue fusion") for i in range(20)])
    memory.add(exp(100, speedup=0.5, lesson="epilogue fusion"))
    chosen = memory.select_for_prompt(GEMM, "epilogue fusion")
    assert len(chosen) == 16
    assert sum(e.kind == "negative" for e in chosen) == 1


def test_a_prompt_is_topped_up_with_a_seeded_random_sample(memory, store):
    relevant = [memory.add(exp(i, lesson="epilogue fusion")) for i in range(3)]
    unrelated = [
        Experience(
            signature=OTHER,
            slow_source=f"a_{i} = 1",
            fast_source=f"b_{i} = 2",
            speedup=1.5,
            lesson="online softmax",
        )
        for i in range(40)
    ]
    memory.add_many(unrelated)
    chosen = memory.select_for_prompt(GEMM, "epilogue fusion")
    assert len(chosen) == 16
    assert sorted(e.id for e in chosen[:3]) == sorted(relevant)
    assert all(e.signature == OTHER for e in chosen[3:])
    again = ExperienceStore(store).select_for_prompt(GEMM, "epilogue fusion")
    assert [e.id for e in again] == [e.id for e in chosen]  # seeded
    reseeded = ExperienceStore(store, MemoryPolicy(seed=1)).select_for_prompt(GEMM, "epilogue")
    assert [e.id for e in reseeded[3:]] != [e.id for e in chosen[3:]]


# --- export / import -------------------------------------------------------------------------


def test_export_then_import_into_a_fresh_store_gives_the_same_entries(memory, tmp_path):
    memory.add_many([exp(i, speedup=1.2 + i / 10, title=f"t{i}") for i in range(5)])
    negative = memory.add(exp(50, speedup=0.5, title="slower"))
    memory.set_feedback(negative, accepted=False)
    path = tmp_path / "export.json"
    assert memory.export_json(path) == 6

    with MemoryStore(tmp_path / "other.sqlite3") as other_store:
        other = ExperienceStore(other_store)
        assert other.import_json(path) == 6
        assert other.import_json(path) == 0
        assert other.count() == 6

        def key(e: Experience) -> tuple:
            return (e.title, e.speedup, e.kind, e.feedback, e.slow_source, e.signature)

        assert sorted(map(key, other.list(100))) == sorted(map(key, memory.list(100)))


def test_import_never_overwrites_a_better_entry(memory, tmp_path):
    path = tmp_path / "export.json"
    memory.add(exp(1, speedup=1.5, title="exported"))
    memory.export_json(path)
    with MemoryStore(tmp_path / "other.sqlite3") as other_store:
        other = ExperienceStore(other_store)
        better = other.add(exp(1, speedup=3.0, title="local and better"))
        assert other.import_json(path) == 0
        assert other.get(better).title == "local and better"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "not a kernel-agent experiences export"),
        ('{"format": "kernel-agent.experiences", "version": 99, "experiences": []}', "newer"),
        ('{"format": "kernel-agent.experiences", "version": 1, "experiences": {}}', "not a list"),
        (
            '{"format": "kernel-agent.experiences", "version": 1, "experiences": '
            '[{"slow_source": "a", "fast_source": "b", "speedup": "fast"}]}',
            "experiences[0]: missing or non-numeric field 'speedup'",
        ),
    ],
)
def test_a_malformed_export_file_gives_a_one_line_error(memory, tmp_path, content, problem):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(MemoryFileError) as error:
        memory.import_json(path)
    message = str(error.value)
    assert "\n" not in message
    assert str(path) in message and problem in message
    assert memory.count() == 0


def test_an_invalid_entry_stops_the_whole_import(memory, tmp_path):
    good = exp(1).to_json()
    path = tmp_path / "half.json"
    path.write_text(
        json.dumps(
            {"format": "kernel-agent.experiences", "version": 1, "experiences": [good, {"x": 1}]}
        )
    )
    with pytest.raises(MemoryFileError, match=r"experiences\[1\]"):
        memory.import_json(path)
    assert memory.count() == 0
