"""The SQLite memory store: WAL, schema migrations, recovery from damage, concurrent writers,
credential scrubbing. Every test goes through a real database file."""

from __future__ import annotations

import itertools
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from memory.experiences import Experience, ExperienceStore, TaskSignature
from memory.logbook import Logbook
from memory.store import (
    SCHEMA_VERSION,
    MemoryStore,
    MemoryStoreError,
    SchemaTooNewError,
    default_path,
    scrub,
)

ROOT = Path(__file__).resolve().parents[2]
SIDES = ("-wal", "-shm")
SIG = TaskSignature(("gemm", "pointwise"), ((128, 256),), "float32", "torch", "cpu")


def _raw(path: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _filled_store(path: Path, n: int = 30) -> None:
    with MemoryStore(path) as store:
        experiences = ExperienceStore(store)
        for i in range(n):
            experiences.add(
                Experience(
                    signature=SIG,
                    slow_source=f"a_{i} = torch.relu(x @ w)\n" * 20,
                    fast_source=f"b_{i} = torch.addmm(b, x, w).relu_()\n" * 20,
                    speedup=1.5,
                    lesson="fuse the epilogue " * 20,
                )
            )


# --- opening ---------------------------------------------------------------------------------


def test_new_store_uses_wal_and_the_current_schema_version(tmp_path):
    path = tmp_path / "memory.sqlite3"
    with MemoryStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.recovered_from is None
    assert _raw(path, "PRAGMA journal_mode")[0][0] == "wal"
    assert _raw(path, "PRAGMA user_version")[0][0] == SCHEMA_VERSION
    tables = {row[0] for row in _raw(path, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"experiences", "attempts", "meta"} <= tables


def test_default_path_follows_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNEL_AGENT_MEMORY", str(tmp_path / "elsewhere.db"))
    assert default_path() == tmp_path / "elsewhere.db"
    monkeypatch.delenv("KERNEL_AGENT_MEMORY")
    assert default_path().name == "memory.sqlite3"
    assert "kernel-agent" in str(default_path())


def test_store_opens_a_missing_directory(tmp_path):
    with MemoryStore(tmp_path / "a" / "b" / "memory.sqlite3") as store:
        assert store.schema_version == SCHEMA_VERSION


V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE experiences (
    id INTEGER PRIMARY KEY AUTOINCREMENT, signature TEXT NOT NULL, target TEXT NOT NULL,
    slow_source TEXT NOT NULL, fast_source TEXT NOT NULL, speedup REAL NOT NULL,
    plan TEXT NOT NULL, title TEXT NOT NULL, lesson TEXT NOT NULL, model TEXT NOT NULL,
    created_at REAL NOT NULL, kind TEXT NOT NULL, source_hash TEXT NOT NULL,
    pair_hash TEXT NOT NULL UNIQUE
);
INSERT INTO experiences VALUES (
    7, '{"op_categories": ["gemm"], "shapes": [[64, 64]], "dtype": "float32",
         "target": "cuda", "device_name": "H200"}',
    'cuda', 'slow = 1', 'fast = 2', 1.8, 'tile the gemm in shared memory',
    'Shared-memory tiling', 'tiles of 64 cut global loads', 'offline', 1700000000.0,
    'positive', 'h', 'p'
);
PRAGMA user_version = 1;
"""


def test_a_version_1_database_is_migrated_and_keeps_its_rows(tmp_path):
    path = tmp_path / "memory.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(V1_SCHEMA)
    conn.close()

    with MemoryStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 3
        experiences = ExperienceStore(store)
        old = experiences.get(7)
        assert old is not None
        assert (old.title, old.feedback, old.speedup) == ("Shared-memory tiling", "none", 1.8)
        cuda = TaskSignature(("gemm",), ((64, 64),), "float32", "cuda", "H200")
        (found, _score), *_ = experiences.retrieve(cuda, "shared memory tiling", k=1)
        assert found.id == 7
        attempt = Logbook(store).record("t", verdict="correct", source="x = 1", speedup=1.0)
        assert attempt.id >= 1
        new_id = experiences.add(
            Experience(signature=cuda, slow_source="a = 1", fast_source="b = 2", speedup=2.0)
        )
        assert new_id is not None and new_id > 7
    assert _raw(path, "PRAGMA user_version")[0][0] == SCHEMA_VERSION


def test_a_database_from_newer_code_is_refused_with_one_line(tmp_path):
    path = tmp_path / "memory.sqlite3"
    MemoryStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 3}")
    conn.close()

    with pytest.raises(SchemaTooNewError) as error:
        MemoryStore(path)
    message = str(error.value)
    assert "\n" not in message
    assert f"schema version {SCHEMA_VERSION + 3}" in message and "upgrade" in message
    assert path.exists()  # refused, not moved aside
    assert not list(tmp_path.glob("*.corrupt-*"))


def test_a_garbage_file_is_moved_aside_and_a_fresh_store_works(tmp_path):
    path = tmp_path / "memory.sqlite3"
    garbage = b"this is not a database\x00\xff" * 200
    path.write_bytes(garbage)

    with MemoryStore(path) as store:
        assert store.recovered_from is not None
        assert "\n" not in store.recovered_from
        assert "moved it to" in store.recovered_from
        experiences = ExperienceStore(store)
        assert experiences.add(
            Experience(signature=SIG, slow_source="a = 1", fast_source="b = 2", speedup=2.0)
        )
        assert experiences.count() == 1

    aside = list(tmp_path.glob("memory.sqlite3.corrupt-*"))
    assert len(aside) == 1
    assert aside[0].read_bytes() == garbage  # the user's data is never deleted
    assert str(aside[0]) in store.recovered_from


def test_a_truncated_database_is_moved_aside_with_its_wal_files(tmp_path):
    path = tmp_path / "memory.sqlite3"
    _filled_store(path, n=60)
    size = path.stat().st_size
    assert size > 8 * 4096
    with open(path, "r+b") as handle:
        handle.truncate(size // 2)
    wal = tmp_path / "memory.sqlite3-wal"
    wal.write_bytes(b"left over")

    with MemoryStore(path) as store:
        assert store.recovered_from is not None
        assert ExperienceStore(store).count() == 0

    aside = [p for p in tmp_path.glob("memory.sqlite3.corrupt-*") if p.name[-4:] not in SIDES]
    assert len(aside) == 1 and aside[0].stat().st_size == size // 2
    assert (tmp_path / (aside[0].name + "-wal")).read_bytes() == b"left over"


def test_a_crash_left_wal_is_recovered_not_treated_as_damage(tmp_path):
    live = tmp_path / "live.sqlite3"
    with MemoryStore(live) as store:
        store.set_meta("before", "crash")
        # Copy the files while a connection is open: what a crashed process leaves behind.
        crashed = tmp_path / "crashed.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            source = live.with_name(live.name + suffix)
            if source.exists():
                crashed.with_name(crashed.name + suffix).write_bytes(source.read_bytes())
    assert crashed.with_name(crashed.name + "-wal").stat().st_size > 0

    with MemoryStore(crashed) as store:
        assert store.recovered_from is None
        assert store.get_meta("before") == "crash"


def test_a_short_file_with_a_sqlite_header_is_moved_aside(tmp_path):
    path = tmp_path / "memory.sqlite3"
    path.write_bytes(b"SQLite format 3\x00" + b"\x00" * 20)
    with MemoryStore(path) as store:
        assert store.recovered_from is not None
        assert store.schema_version == SCHEMA_VERSION


# --- writing ---------------------------------------------------------------------------------


def test_a_failed_write_is_rolled_back(tmp_path):
    with MemoryStore(tmp_path / "m.db") as store:

        def fail(tx):
            tx.execute("INSERT INTO meta (key, value) VALUES ('a', 'b')")
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            store.write(fail)
        assert store.get_meta("a") is None
        store.set_meta("a", "c")
        assert store.get_meta("a") == "c"


def test_a_write_waits_for_another_writer_to_finish(tmp_path):
    path = tmp_path / "m.db"
    with MemoryStore(path, busy_timeout_s=0.05) as store:
        blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        blocker.execute("BEGIN IMMEDIATE")
        release = threading.Timer(0.5, lambda: blocker.execute("COMMIT"))
        release.start()
        started = time.monotonic()
        store.set_meta("k", "v")  # locked past busy_timeout: retried with backoff
        assert time.monotonic() - started >= 0.4
        assert store.get_meta("k") == "v"
        release.join()
        blocker.close()


def test_a_writer_that_never_lets_go_gives_a_clear_error(tmp_path):
    path = tmp_path / "m.db"
    with MemoryStore(path, busy_timeout_s=0.01, lock_retries=3) as store:
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(MemoryStoreError, match="locked"):
                store.set_meta("k", "v")
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()


WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from memory.experiences import Experience, ExperienceStore, TaskSignature
    from memory.logbook import Logbook
    from memory.store import MemoryStore

    path, tag, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    deadline = time.time() + 90
    while not go.exists() and time.time() < deadline:
        time.sleep(0.002)
    sig = TaskSignature(("gemm",), ((64, 64),), "float32", "torch", "cpu")
    other = "b" if tag == "a" else "a"
    with MemoryStore(path) as store:
        experiences, logbook = ExperienceStore(store), Logbook(store)
        for i in range(200):
            new = experiences.add(Experience(
                signature=sig, slow_source=f"slow_{tag}_{i} = x + 1",
                fast_source=f"fast_{tag}_{i} = x.add_(1)", speedup=1.5, title=f"{tag} {i}"))
            assert new is not None
            logbook.record(f"task-{tag}", verdict="correct", source=f"k_{tag}_{i} = {i}",
                           plan=f"plan {tag} {i}", speedup=1.0 + i / 100)
            if i % 50 == 49:  # a barrier every 50 rows: both write in each of four rounds
                (go.parent / f"{tag}.{i}").touch()
                while not (go.parent / f"{other}.{i}").exists() and time.time() < deadline:
                    time.sleep(0.002)
        print("recovered:", store.recovered_from)
    """
)


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path = tmp_path / "shared.sqlite3"  # created by whichever child gets there first
    go = tmp_path / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), tag, str(go)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("a", "b")
    ]
    time.sleep(0.5)  # both interpreters are up and waiting on the start line
    go.touch()
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        assert "recovered: None" in out

    with MemoryStore(path) as store:
        assert ExperienceStore(store).count() == 400
        logbook = Logbook(store)
        assert sorted(logbook.tasks()) == ["task-a", "task-b"]
        assert len(logbook.attempts("task-a")) == len(logbook.attempts("task-b")) == 200
    titles = [row[0] for row in _raw(path, "SELECT title FROM experiences ORDER BY id")]
    assert set(titles) == {f"{tag} {i}" for tag in "ab" for i in range(200)}
    writers = [title[0] for title in titles]
    switches = sum(1 for a, b in itertools.pairwise(writers) if a != b)
    # Both held the database open throughout, and the barriers make each write in each of four
    # rounds, so the writers alternate at least four times however the scheduler slices them.
    assert switches >= 4, "the two writers did not overlap; the test proved nothing"


OPENER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from memory.experiences import Experience, ExperienceStore, TaskSignature
    from memory.store import MemoryStore

    path, tag, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    while not go.exists():
        time.sleep(0.002)
    with MemoryStore(path) as store:
        ExperienceStore(store).add(Experience(
            signature=TaskSignature(), slow_source=f"a_{tag} = 1", fast_source=f"b_{tag} = 2",
            speedup=2.0))
        print("recovered:", store.recovered_from)
    """
)


def test_two_processes_opening_a_damaged_file_recover_it_once(tmp_path):
    path = tmp_path / "shared.sqlite3"
    path.write_bytes(b"garbage" * 1000)
    go = tmp_path / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, str(path), tag, str(go)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("a", "b", "c")
    ]
    time.sleep(0.5)
    go.touch()
    outputs = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        outputs.append(out)
    assert sum("recovered: None" not in out for out in outputs) == 1
    aside = [p for p in tmp_path.glob("shared.sqlite3.corrupt-*") if p.name[-4:] not in SIDES]
    assert len(aside) == 1 and aside[0].read_bytes() == b"garbage" * 1000
    with MemoryStore(path) as store:
        assert ExperienceStore(store).count() == 3


# --- credentials -----------------------------------------------------------------------------

SECRETS = [
    "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "sk-proj-abcdefghijklmnopqrstuvwx1234567",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "xoxb-123456789012-abcdefghijklmn",
    "AKIAIOSFODNN7EXAMPLE",
    "3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c",  # after api_key=
    "QUJDREVGR0hJSktMTU5PUA==",  # after "secret":
    "hunter2",  # after password=
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl",
]
LEAKY = (
    "key=sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 and "
    "OPENAI sk-proj-abcdefghijklmnopqrstuvwx1234567 gh ghp_abcdefghijklmnopqrstuvwxyz0123456789 "
    "slack xoxb-123456789012-abcdefghijklmn aws AKIAIOSFODNN7EXAMPLE "
    'api_key = "3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c" {"secret": "QUJDREVGR0hJSktMTU5PUA=="} '
    "password=hunter2 Authorization: Bearer "
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("key=sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123", "key=[redacted]"),
        ("use sk-proj-abcdefghijklmnopqrstuvwx1234 here", "use [redacted] here"),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "[redacted]"),
        ("xoxp-1234567890-abcdefghij", "[redacted]"),
        ("AKIAIOSFODNN7EXAMPLE", "[redacted]"),
        ("token=0123456789abcdef0123", "token=[redacted]"),
        ('GITHUB_TOKEN: "abcDEFghiJKLmnoPQRst"', 'GITHUB_TOKEN: "[redacted]"'),
        ("secret=QUJDREVGR0hJSktMTU5PUA==", "secret=[redacted]"),
        ("password=hunter2", "password=[redacted]"),
        ("Authorization: Bearer abc.def.ghi", "Authorization: [redacted]"),
        ("https://bob:s3cr3t@example.com/x", "https://[redacted]@example.com/x"),
    ],
)
def test_scrub_redacts_credentials(text, expected):
    assert scrub(text) == expected
    assert scrub(scrub(text)) == scrub(text)


@pytest.mark.parametrize(
    "code",
    [
        "sorted(x, key=lambda t: t[0])",
        "client.create(max_tokens=4096)",
        "mask-1",
        "key=some_long_identifier_name",
        "y = torch.relu(x @ w.t()) + b  # tokens = 12",
        "__global__ void k(float* __restrict__ out, const float* in) { out[0] = in[0]; }",
    ],
)
def test_scrub_leaves_ordinary_code_alone(code):
    assert scrub(code) == code


def test_no_credential_reaches_any_database_row(tmp_path):
    path = tmp_path / "m.db"
    with MemoryStore(path) as store:
        experiences = ExperienceStore(store)
        leaky_signature = TaskSignature(("gemm",), ((4, 4),), "float32", "torch", LEAKY)
        exp_id = experiences.add(
            Experience(
                signature=leaky_signature,
                slow_source=f"# {LEAKY}\nx = 1",
                fast_source=f"'''{LEAKY}'''\ny = 2",
                speedup=1.5,
                plan=LEAKY,
                title=LEAKY,
                lesson=LEAKY,
                model=LEAKY,
            )
        )
        assert exp_id is not None
        logbook = Logbook(store)
        root = logbook.record(
            "task", verdict="correct", source=f"# {LEAKY}\nz = 3", plan=LEAKY, skills=(LEAKY,)
        )
        logbook.record(
            "task", verdict="runtime_error", source="w = 4", parent_id=root.id, error=LEAKY
        )
        store.set_meta("note", LEAKY)
        assert "[redacted]" in experiences.get(exp_id).lesson

    conn = sqlite3.connect(path)
    dump = "\n".join(conn.iterdump())
    conn.close()
    for secret in SECRETS:
        assert secret not in dump, secret
    assert "[redacted]" in dump
