"""Remembered tuning choices: the tile config that won autotuning for one kind of kernel site.

Autotuning a Triton GEMM compiles and times every config of a table on the first call (tens of
seconds on a GPU). The winner depends on the op, its epilogue, the dtype, the shape and the
device, so it is stored under (pass, op signature, shape class, device name); a later run
over the same or a similar shape (each of M, N, K bucketed to the next power of two) hands
the pass that one config and compiles nothing else. Only choices from candidates the
verifier judged correct are written (agents/offline/roles.py holds them until then).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from memory.store import MemoryStore, Transaction

log = logging.getLogger("kernel_agent.memory")

CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
"""What a remembered config may hold; BLOCK_N is absent where the launcher sets it."""
RECALL_LIMIT = 512  # entries handed to one pass request (most used, then newest, first)


def bucket(size: int) -> int:
    """The next power of two at or above `size` (1 for 0 or less): shapes in one bucket
    share a remembered tile."""
    return 1 if size <= 1 else 1 << (int(size) - 1).bit_length()


def shape_class(m: int, n: int, k: int, batch: int = 1) -> str:
    """`M1024xN8192xK8192`; a batched GEMM (batch > 1) is also bucketed by its batch, since
    the batch, like M and N, sets how many tiles fill the device (`B128xM512xN512xK512`)."""
    size = f"M{bucket(m)}xN{bucket(n)}xK{bucket(k)}"
    return size if batch <= 1 else f"B{bucket(batch)}x{size}"


def op_signature(kind: str, epilogue: tuple[str, ...] | list[str], dtype: str) -> str:
    """`linear+add+relu:float32`: the GEMM's op, its fused epilogue ops in order, the dtype."""
    return "+".join([kind, *epilogue]) + ":" + dtype.replace("torch.", "")


def check_config(config: Any) -> dict[str, int]:
    """The config as str -> positive int, or ValueError naming what is wrong: it becomes
    kernel source, so nothing but known keys with small integers gets through."""
    if not isinstance(config, dict) or not config:
        raise ValueError(f"a config must be a non-empty mapping, not {config!r:.80}")
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise ValueError(f"unknown config key {unknown[0]!r}")
    checked: dict[str, int] = {}
    for key in CONFIG_KEYS:
        if key not in config:
            if key != "BLOCK_N":
                raise ValueError(f"config without {key}")
            continue
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1024:
            raise ValueError(f"config {key} = {value!r} is not an integer in 1..1024")
        checked[key] = value
    return checked


@dataclass(frozen=True)
class TuningKey:
    pass_name: str
    op_signature: str
    shape_class: str
    device_name: str


@dataclass(frozen=True)
class TuningRecord:
    """One remembered choice: the config, the kernel's time with it (None when it was not
    benchmarked), the seconds tuning took when it was found, and how often it was reused."""

    key: TuningKey
    config: dict[str, int]
    time_ms: float | None
    tuning_s: float
    hits: int = 0

    def as_request(self) -> dict[str, Any]:
        """What a pass request carries (JSON)."""
        return {
            "op_signature": self.key.op_signature,
            "shape_class": self.key.shape_class,
            "device_name": self.key.device_name,
            "config": dict(self.config),
        }


@dataclass(frozen=True)
class Observation:
    """What one candidate's first call showed for one kernel: the config it ran (the tuned
    winner, or the remembered one when `from_memory`)."""

    key: TuningKey
    config: dict[str, int]
    time_ms: float | None
    tuning_s: float
    from_memory: bool


def observation_from(pass_name: str, raw: Any) -> Observation:
    """An observation from a child's reply; ValueError when it is malformed."""
    if not isinstance(raw, dict):
        raise ValueError(f"an observation must be a mapping, not {type(raw).__name__}")
    try:
        fields = [str(raw[name]) for name in ("op_signature", "shape_class", "device_name")]
        time_ms = None if raw.get("time_ms") is None else float(raw["time_ms"])
        tuning_s = float(raw.get("tuning_s") or 0.0)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"malformed observation: {type(error).__name__}: {error}") from None
    if not all(fields):
        raise ValueError("an observation without op signature, shape class or device name")
    key = TuningKey(pass_name, *fields)
    return Observation(
        key, check_config(raw.get("config")), time_ms, tuning_s, bool(raw.get("from_memory"))
    )


class TuningMemory:
    """The `tuning` table of the memory database."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def record(self, observation: Observation) -> None:
        """A verified candidate's choice. Reusing a remembered config counts a hit (the
        entry stays as it is); a tuned winner replaces the entry (last tuning wins: the
        latest run saw the current code and device)."""
        key = observation.key
        where = "pass_name = ? AND op_signature = ? AND shape_class = ? AND device_name = ?"
        params = (key.pass_name, key.op_signature, key.shape_class, key.device_name)
        config = json.dumps(observation.config, sort_keys=True)
        now = time.time()

        def write(tx: Transaction) -> None:
            if observation.from_memory:
                tx.execute(
                    f"UPDATE tuning SET hits = hits + 1, updated_at = ? WHERE {where}",
                    (now, *params),
                )
                return
            tx.execute(
                "INSERT INTO tuning (pass_name, op_signature, shape_class, device_name, config, "
                "time_ms, tuning_s, hits, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?) "
                "ON CONFLICT (pass_name, op_signature, shape_class, device_name) DO UPDATE SET "
                "config = excluded.config, time_ms = excluded.time_ms, "
                "tuning_s = excluded.tuning_s, hits = CASE WHEN tuning.config = "
                "excluded.config THEN tuning.hits ELSE 0 END, updated_at = excluded.updated_at",
                (*params, config, observation.time_ms, observation.tuning_s, now, now),
            )

        self.store.write(write)

    def recall(self, pass_name: str, device_name: str | None = None) -> list[TuningRecord]:
        """The pass's remembered choices (on one device, if given), most used first. A
        malformed row is skipped with a warning that names it: memory must never stop a run."""
        sql = (
            "SELECT id, pass_name, op_signature, shape_class, device_name, config, time_ms, "
            "tuning_s, hits FROM tuning WHERE pass_name = ?"
        )
        params: tuple[Any, ...] = (pass_name,)
        if device_name is not None:
            sql += " AND device_name = ?"
            params += (device_name,)
        rows = self.store.query(
            sql + " ORDER BY hits DESC, updated_at DESC LIMIT ?", (*params, RECALL_LIMIT)
        )
        records = []
        for row in rows:
            try:
                records.append(_record(row))
            except (ValueError, TypeError) as error:
                log.warning(
                    "memory: skipped tuning row %s (%s): %s", row["id"], row["op_signature"], error
                )
        return records

    def get(self, key: TuningKey) -> TuningRecord | None:
        return next(
            (
                r
                for r in self.recall(key.pass_name, key.device_name)
                if (r.key.op_signature, r.key.shape_class) == (key.op_signature, key.shape_class)
            ),
            None,
        )


def _record(row: Any) -> TuningRecord:
    try:
        config = json.loads(row["config"])
    except (TypeError, json.JSONDecodeError) as error:
        raise ValueError(f"config is not JSON: {error}") from None
    key = TuningKey(row["pass_name"], row["op_signature"], row["shape_class"], row["device_name"])
    time_ms = None if row["time_ms"] is None else float(row["time_ms"])
    return TuningRecord(
        key, check_config(config), time_ms, float(row["tuning_s"]), int(row["hits"])
    )


def for_device(entries: Any, device_name: str) -> dict[str, dict[str, int]]:
    """A pass request's remembered entries for this device, as the pass reads them:
    "op signature|shape class" -> config. Malformed entries are left out (a warning)."""
    chosen: dict[str, dict[str, int]] = {}
    for entry in entries if isinstance(entries, list) else []:
        try:
            if entry["device_name"] != device_name:
                continue
            chosen.setdefault(
                site_key(entry["op_signature"], entry["shape_class"]), check_config(entry["config"])
            )
        except (KeyError, TypeError, ValueError) as error:
            log.warning("memory: ignored a remembered tuning entry: %s", error)
    return chosen


def site_key(signature: str, shape: str) -> str:
    return f"{signature}|{shape}"
