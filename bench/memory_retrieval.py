"""How fast the optimization memory answers a planner: retrieval over N synthetic experiences.

Usage: python bench/memory_retrieval.py [N]   (default 10,000; target: warm median < 20 ms)

Builds a throw-away store with N varied experiences (random op categories, shapes, dtypes,
targets, lessons drawn from a vocabulary, small sources), then times inserts, opening the
file (with its integrity check), the first retrieval of a fresh process (cold: builds the
index) and later ones (warm), for `retrieve(k=16)` and `select_for_prompt`.
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memory.experiences import Experience, ExperienceStore, TaskSignature
from memory.store import MemoryStore

CATEGORIES = [
    *("gemm", "conv", "pointwise", "reduction", "norm", "softmax", "pool", "attention"),
    *("scan", "gather", "scatter", "transpose", "embedding", "loss", "activation", "copy"),
]
TARGETS = ["torch", "cpu-cpp", "cuda", "triton"]
DTYPES = ["float32", "float16", "bfloat16"]
DEVICES = ["H200", "A100", "RTX 4090", "cpu"]
WORDS = [
    *("fuse", "epilogue", "bias", "relu", "gelu", "tile", "shared", "memory", "registers"),
    *("vectorize", "float4", "coalesce", "warp", "shuffle", "reduce", "occupancy", "launch"),
    *("bounds", "bank", "conflicts", "tensor", "cores", "wmma", "mma", "pipeline", "async"),
    *("prefetch", "im2col", "winograd", "online", "welford", "variance", "layernorm"),
    *("persistent", "grid", "stride", "split", "atomics", "transpose", "padding", "swizzle"),
    *("cache", "blocking", "unroll", "loop", "inline", "precompute", "weights", "algebra"),
    *("reassociate", "broadcast", "contiguous", "layout", "channels", "last", "inplace"),
    *("allocation", "graph", "capture", "stream", "overlap", "latency", "bandwidth", "l2"),
]
OPS = ["relu", "gelu", "addmm", "matmul", "softmax", "layer_norm", "conv2d", "sum", "mean"]
QUERIES = 50
COLD_RUNS = 7


def experience(rng: random.Random, i: int) -> Experience:
    signature = TaskSignature(
        tuple(rng.sample(CATEGORIES, rng.randint(1, 3))),
        tuple(
            tuple(rng.choice([1, 8, 64, 256, 1024, 4096]) for _ in range(rng.randint(1, 4)))
            for _ in range(rng.randint(1, 3))
        ),
        rng.choice(DTYPES),
        rng.choice(TARGETS),
        rng.choice(DEVICES),
    )
    body = "\n".join(
        f"    y{j} = torch.{rng.choice(OPS)}(y{j - 1}) * {rng.randint(1, 99)}"
        for j in range(1, rng.randint(4, 20))
    )
    slow = f"def forward_{i}(y0):\n{body}\n    return y{body.count(chr(10)) + 1}\n"
    fast = slow.replace("torch.", "torch.ops.fast.", rng.randint(1, 3))
    return Experience(
        signature=signature,
        slow_source=slow,
        fast_source=fast + f"# variant {i}\n",
        speedup=rng.choice([rng.uniform(1.05, 4.0), rng.uniform(0.3, 0.86)]),
        title=" ".join(rng.choices(WORDS, k=5)),
        lesson=" ".join(rng.choices(WORDS, k=rng.randint(10, 40))),
        plan=" ".join(rng.choices(WORDS, k=rng.randint(5, 20))),
        model=rng.choice(["claude", "gpt-oss-120b", "offline"]),
        created_at=1.7e9 + i,
    )


def query(rng: random.Random) -> tuple[TaskSignature, str]:
    sample = experience(rng, -1)
    return sample.signature, " ".join(rng.choices(WORDS, k=rng.randint(5, 30)))


def ms(seconds: list[float]) -> tuple[float, float]:
    values = sorted(s * 1000 for s in seconds)
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return statistics.median(values), p95


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    rng = random.Random(0)
    experiences = [experience(rng, i) for i in range(n)]
    queries = [query(rng) for _ in range(QUERIES)]
    rows: list[tuple[str, float, float, str]] = []

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memory.sqlite3"
        with MemoryStore(path) as store:
            memory = ExperienceStore(store)
            singles = experiences[:200]
            started = time.perf_counter()
            for exp in singles:
                memory.add(exp)
            single_s = (time.perf_counter() - started) / len(singles)
            started = time.perf_counter()
            for start in range(len(singles), n, 500):
                memory.add_many(experiences[start : start + 500])
            batch_s = (time.perf_counter() - started) / max(1, n - len(singles))
            stored = memory.count()
        rows.append(("add(), one transaction each", single_s * 1000, single_s * 1000, "per item"))
        rows.append(("add_many(), 500 a batch", batch_s * 1000, batch_s * 1000, "per item"))

        opens, colds, warms, prompts = [], [], [], []
        for run in range(COLD_RUNS):
            started = time.perf_counter()
            store = MemoryStore(path)
            opens.append(time.perf_counter() - started)
            memory = ExperienceStore(store)  # a fresh process: no cached index
            signature, text = queries[run]
            started = time.perf_counter()
            memory.retrieve(signature, text, k=16)
            colds.append(time.perf_counter() - started)
            if run == COLD_RUNS - 1:
                for signature, text in queries:
                    started = time.perf_counter()
                    results = memory.retrieve(signature, text, k=16)
                    warms.append(time.perf_counter() - started)
                    assert len(results) == 16
                    started = time.perf_counter()
                    memory.select_for_prompt(signature, text)
                    prompts.append(time.perf_counter() - started)
            store.close()
        size_mb = path.stat().st_size / 1e6

    rows.append(("open (integrity check)", *ms(opens), f"{COLD_RUNS} opens"))
    rows.append(("retrieve k=16, cold", *ms(colds), f"{COLD_RUNS} fresh stores"))
    rows.append(("retrieve k=16, warm", *ms(warms), f"{QUERIES} queries"))
    rows.append(("select_for_prompt, warm", *ms(prompts), f"{QUERIES} queries"))

    print(f"memory retrieval: {stored:,} experiences, {size_mb:.1f} MB on disk")
    print(f"{'operation':<30} {'median ms':>10} {'p95 ms':>10}  note")
    for name, median, p95, note in rows:
        print(f"{name:<30} {median:>10.2f} {p95:>10.2f}  {note}")
    warm_median = ms(warms)[0]
    verdict = "meets" if warm_median < 20 else "MISSES"
    print(f"warm median {warm_median:.2f} ms {verdict} the 20 ms target")


if __name__ == "__main__":
    main()
