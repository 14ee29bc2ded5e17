"""The one durable store behind the memory: a SQLite file shared by every kernel-agent process.

The language server and CLI runs write to it at the same time, so it runs in WAL mode with a
long busy timeout and short `BEGIN IMMEDIATE` transactions that are retried when locked. A
damaged file is moved aside (never deleted) and a fresh one started, because losing the
memory must never stop an optimisation run. Every string written passes through `scrub`, so
no credential that leaked into a prompt, a log or a kernel ever reaches the disk.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import platformdirs

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("kernel_agent.memory")

ENV_VAR = "KERNEL_AGENT_MEMORY"
SQLITE_HEADER = b"SQLite format 3\x00"
BUSY_TIMEOUT_S = 30.0
LOCK_RETRIES = 8  # after busy_timeout runs out, with backoff up to 1 s
_SIDE_FILES = ("-wal", "-shm", "-journal")
# OperationalErrors that say "not now" or "not allowed", not "this file is damaged".
_NOT_CORRUPTION = ("locked", "busy", "unable to open", "readonly", "read-only", "disk is full")

T = TypeVar("T")


class MemoryStoreError(RuntimeError):
    """The store cannot be used; the message is one line meant for the user."""


class SchemaTooNewError(MemoryStoreError):
    """The file was written by a newer kernel-agent; we refuse rather than damage it."""


def default_path() -> Path:
    """$KERNEL_AGENT_MEMORY, else the per-user data directory (shared by server and CLI)."""
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_data_dir("kernel-agent")) / "memory.sqlite3"


# --- credentials ---------------------------------------------------------------------------

_REDACTED = "[redacted]"
_SECRET_NAME = r"[A-Za-z0-9_.\-]*(?:key|token|secret|passwd|password|credential|auth)s?"
# (substrings that must occur, case-insensitively, for the pattern to be worth running, pattern)
_TOKEN_PATTERNS: list[tuple[tuple[str, ...], re.Pattern[str]]] = [
    # PEM private keys, whole block.
    (
        ("private key",),
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S
        ),
    ),
    # Authorization headers and bare bearer tokens.
    (
        ("authorization:",),
        re.compile(r"(?i)(?<=authorization:)[ \t]*(?:(?:bearer|basic|token)[ \t]+)?[^\s\"',;]+"),
    ),
    (("bearer",), re.compile(r"(?i)\bbearer[ \t]+[A-Za-z0-9._~+/\-]{12,}=*")),
    # Provider key formats.
    (("sk-",), re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{10,}")),
    (("sk-",), re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{16,}")),
    (("gh",), re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}")),
    (("github_pat_",), re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}")),
    (("xox",), re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}")),
    (("akia", "asia"), re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    (("aiza",), re.compile(r"\bAIza[0-9A-Za-z_\-]{35}")),
    (("hf_",), re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    (("glpat-",), re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}")),
    # JSON web tokens.
    (("eyj",), re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]+")),
    # user:password@ in URLs.
    (("://",), re.compile(r"(?<=://)[^\s/@:]+:[^\s/@]+(?=@)")),
]
_NAME_TRIGGERS = ("key", "token", "secret", "passw", "credential", "auth")
# NAME=value / NAME: value / "NAME": "value" where NAME ends in key, token, secret, ...
_ASSIGNED = re.compile(
    r"(?i)(?P<name>\b" + _SECRET_NAME + r"[\"']?[ \t]*(?:=|:)[ \t]*[\"']?)"
    r"(?P<value>[^\s\"'\\,;)}\]]+)"
)


def scrub(text: str) -> str:
    """`text` with anything that looks like a credential replaced by `[redacted]`.

    Provider formats (sk-..., sk-ant-..., ghp_..., xoxb-..., AKIA..., hf_..., JWTs, PEM keys,
    Authorization headers, URL passwords) always go. After a name ending in key/token/
    secret/password/credential/auth, a value goes when it looks random: any value after a
    password, else 16+ characters with a digit or mixed case (so `key=lambda t: t[0]` and
    `max_tokens=4096` survive).
    """
    if not text:
        return text
    lowered = text.lower()
    for triggers, pattern in _TOKEN_PATTERNS:
        if any(trigger in lowered for trigger in triggers):
            text = pattern.sub(_redacted_keeping_space, text)
    if any(trigger in lowered for trigger in _NAME_TRIGGERS):
        text = _ASSIGNED.sub(_redact_assignment, text)
    return text


def _redacted_keeping_space(match: re.Match[str]) -> str:
    """Keep the whitespace a match starts with (`Authorization: [redacted]`)."""
    text = match.group(0)
    return text[: len(text) - len(text.lstrip(" \t"))] + _REDACTED


def _redact_assignment(match: re.Match[str]) -> str:
    name, value = match.group("name"), match.group("value")
    if value.startswith(_REDACTED[:-1]):  # already scrubbed: keep scrub idempotent
        return match.group(0)
    lowered = name.lower()
    if "passw" in lowered and len(value) >= 3:
        return name + _REDACTED
    if len(value) >= 16 and re.fullmatch(r"[A-Za-z0-9+/_.\-]+=*", value):
        has_digit = any(c.isdigit() for c in value)
        mixed = any(c.islower() for c in value) and any(c.isupper() for c in value)
        if has_digit or mixed:
            return name + _REDACTED
    return match.group(0)


# --- schema --------------------------------------------------------------------------------


def _v1(conn: sqlite3.Connection) -> None:
    """First schema: experiences (AccelOpt's optimization memory) and meta."""
    conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute(
        """CREATE TABLE IF NOT EXISTS experiences (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            signature TEXT NOT NULL,
            target TEXT NOT NULL,
            slow_source TEXT NOT NULL,
            fast_source TEXT NOT NULL,
            speedup REAL NOT NULL,
            plan TEXT NOT NULL,
            title TEXT NOT NULL,
            lesson TEXT NOT NULL,
            model TEXT NOT NULL,
            created_at REAL NOT NULL,
            kind TEXT NOT NULL,
            source_hash TEXT NOT NULL,
            pair_hash TEXT NOT NULL UNIQUE
        )"""
    )


def _v2(conn: sqlite3.Connection) -> None:
    """Feedback, retrieval features and the logbook.

    The experiences table is rebuilt so that everything retrieval reads comes before the
    sources: SQLite then builds the index from each row's first page, without following the
    overflow pages that long sources spill into. `terms` stays NULL for migrated rows;
    `ExperienceStore` fills it on open.
    """
    conn.execute(
        """CREATE TABLE experiences_v2 (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            kind TEXT NOT NULL,
            feedback TEXT NOT NULL DEFAULT 'none',
            created_at REAL NOT NULL,
            speedup REAL NOT NULL,
            target TEXT NOT NULL,
            dtype TEXT NOT NULL DEFAULT '',
            device_name TEXT NOT NULL DEFAULT '',
            log_numel REAL,
            op_categories TEXT NOT NULL DEFAULT '',
            pair_hash TEXT NOT NULL UNIQUE,
            source_hash TEXT NOT NULL,
            model TEXT NOT NULL,
            terms BLOB,
            title TEXT NOT NULL,
            signature TEXT NOT NULL,
            plan TEXT NOT NULL,
            lesson TEXT NOT NULL,
            slow_source TEXT NOT NULL,
            fast_source TEXT NOT NULL
        )"""
    )
    columns = (
        "id, kind, created_at, speedup, target, pair_hash, source_hash, model, title, "
        "signature, plan, lesson, slow_source, fast_source"
    )
    conn.execute(f"INSERT INTO experiences_v2 ({columns}) SELECT {columns} FROM experiences")
    conn.execute("DROP TABLE experiences")
    conn.execute("ALTER TABLE experiences_v2 RENAME TO experiences")
    conn.execute("CREATE INDEX experiences_created ON experiences (created_at)")
    conn.execute("CREATE INDEX experiences_unindexed ON experiences (id) WHERE terms IS NULL")
    conn.execute(
        """CREATE TABLE attempts (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            task_id TEXT NOT NULL,
            parent_id INTEGER REFERENCES attempts (id) ON DELETE SET NULL,
            depth INTEGER NOT NULL DEFAULT 0,
            verdict TEXT NOT NULL,
            speedup REAL,
            created_at REAL NOT NULL,
            source_hash TEXT NOT NULL,
            plan_key TEXT NOT NULL,
            skills TEXT NOT NULL,
            plan TEXT NOT NULL,
            error_digest TEXT NOT NULL,
            source TEXT
        )"""
    )
    conn.execute("CREATE INDEX attempts_task ON attempts (task_id, id)")
    conn.execute("CREATE INDEX attempts_hash ON attempts (task_id, source_hash)")
    conn.execute("CREATE INDEX attempts_parent ON attempts (parent_id)")


def _v3(conn: sqlite3.Connection) -> None:
    """Remembered tuning choices (memory/tuning.py): one winning config per (pass, op
    signature, shape class, device), so a later run compiles that one instead of a table."""
    conn.execute(
        """CREATE TABLE tuning (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            pass_name TEXT NOT NULL,
            op_signature TEXT NOT NULL,
            shape_class TEXT NOT NULL,
            device_name TEXT NOT NULL,
            config TEXT NOT NULL,
            time_ms REAL,
            tuning_s REAL NOT NULL,
            hits INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            UNIQUE (pass_name, op_signature, shape_class, device_name)
        )"""
    )


MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_v1, _v2, _v3)
"""MIGRATIONS[i] takes the schema from version i to i + 1; append, never edit."""
SCHEMA_VERSION = len(MIGRATIONS)


# --- the store -----------------------------------------------------------------------------


class _Corrupt(Exception):
    """Internal: the file at the path is not a usable SQLite database."""


@dataclass
class Transaction:
    """A write transaction; every str parameter is scrubbed before SQLite sees it."""

    conn: sqlite3.Connection

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, _scrubbed(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> sqlite3.Cursor:
        return self.conn.executemany(sql, [_scrubbed(row) for row in rows])


def _scrubbed(params: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(scrub(p) if isinstance(p, str) else p for p in params)


class MemoryStore:
    """An open memory database. Thread-safe; share one per process, or open one per process."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        lock_retries: int = LOCK_RETRIES,
    ):
        self.path = Path(path) if path is not None else default_path()
        self.busy_timeout_s = busy_timeout_s
        self.lock_retries = max(1, lock_retries)
        self.recovered_from: str | None = None
        """One line saying which damaged file was moved aside at open, else None."""
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise MemoryStoreError(f"cannot create {self.path.parent}: {error}") from None
        self._conn = self._open()

    # context manager ---------------------------------------------------------------------

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise MemoryStoreError(f"memory store {self.path} is closed")
        return self._conn

    # reads and writes ----------------------------------------------------------------------

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Rows of one statement (its own consistent snapshot)."""
        with self._lock:
            return self._retry(lambda: self.conn.execute(sql, params).fetchall())

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run several reads in one snapshot (a deferred transaction)."""

        def attempt() -> T:
            conn = self.conn
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                conn.execute("COMMIT")

        with self._lock:
            return self._retry(attempt)

    def write(self, fn: Callable[[Transaction], T]) -> T:
        """Run `fn` in one short `BEGIN IMMEDIATE` transaction; retried whole when locked."""

        def attempt() -> T:
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(Transaction(conn))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return result

        with self._lock:
            return self._retry(attempt)

    def get_meta(self, key: str) -> str | None:
        rows = self.query("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        self.write(
            lambda tx: tx.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )
        )

    @property
    def schema_version(self) -> int:
        return int(self.query("PRAGMA user_version")[0][0])

    def _retry(self, attempt: Callable[[], T]) -> T:
        """SQLite's busy handler waits `busy_timeout`; past that, back off and try again."""
        delay = 0.01
        for tries in range(self.lock_retries):
            try:
                return attempt()
            except sqlite3.OperationalError as error:
                if not _is_busy(error) or tries == self.lock_retries - 1:
                    if _is_busy(error):
                        raise MemoryStoreError(
                            f"memory database {self.path} stayed locked by another process"
                        ) from error
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    # opening, checking, recovering ---------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        try:
            return self._connect_checked()
        except _Corrupt:
            pass
        # Only one process recovers; the others then find the fresh file healthy.
        with _file_lock(self.path.with_name(self.path.name + ".lock")):
            try:
                return self._connect_checked()
            except _Corrupt as corrupt:
                moved = _move_aside(self.path)
                self.recovered_from = (
                    f"memory database {self.path} was unreadable ({corrupt}); "
                    f"moved it to {moved} and started a new one"
                )
                log.warning("%s", self.recovered_from)
            try:
                return self._connect_checked()
            except _Corrupt as corrupt:
                raise MemoryStoreError(
                    f"cannot create a memory database at {self.path}: {corrupt}"
                ) from None

    def _connect_checked(self) -> sqlite3.Connection:
        try:  # another process may move the file away at any moment: read it once
            with open(self.path, "rb") as handle:
                header = handle.read(100)
        except FileNotFoundError:
            header = b""
        existed = bool(header)
        if existed and (not header.startswith(SQLITE_HEADER) or len(header) < 100):
            raise _Corrupt("not a SQLite file")
        checked = existed and self._check_read_only()
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.OperationalError as error:
            raise MemoryStoreError(f"cannot open memory database {self.path}: {error}") from None
        try:
            self._retry(lambda: self._configure(conn, check=existed and not checked))
            return conn
        except _Corrupt:
            conn.close()
            raise
        except sqlite3.DatabaseError as error:
            conn.close()
            if isinstance(error, sqlite3.OperationalError) and _is_not_corruption(error):
                raise MemoryStoreError(f"memory database {self.path}: {error}") from None
            raise _Corrupt(_first_line(error)) from None
        except BaseException:
            conn.close()
            raise

    def _check_read_only(self) -> bool:
        """Integrity check on a read-only connection, which cannot checkpoint into or delete
        the files of a damaged database before they are moved aside. False: inconclusive
        (for example a crash's WAL needs recovery first); the read-write open checks then."""
        uri = f"{self.path.resolve().as_uri()}?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=self.busy_timeout_s)
        except sqlite3.OperationalError:
            return False
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            result = conn.execute("PRAGMA integrity_check(1)").fetchone()[0]
        except sqlite3.DatabaseError as error:
            if isinstance(error, sqlite3.OperationalError) and _is_not_corruption(error):
                return False
            raise _Corrupt(_first_line(error)) from None
        finally:
            conn.close()
        if result != "ok":
            raise _Corrupt(f"integrity check: {_first_line(result)}")
        return True

    def _configure(self, conn: sqlite3.Connection, *, check: bool) -> None:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            log.warning("memory database %s: journal_mode is %s, not wal", self.path, mode)
        conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: safe against crashes
        conn.execute("PRAGMA foreign_keys = ON")
        if check:
            result = conn.execute("PRAGMA integrity_check(1)").fetchone()[0]
            if result != "ok":
                raise _Corrupt(f"integrity check: {_first_line(result)}")
        self._migrate(conn)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        self._refuse_newer(version)
        if version == SCHEMA_VERSION:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-read under the write lock: another process may have migrated meanwhile.
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            self._refuse_newer(version)
            for step in range(version, SCHEMA_VERSION):
                MIGRATIONS[step](conn)
                conn.execute(f"PRAGMA user_version = {step + 1}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if version != SCHEMA_VERSION:
            log.info("memory database %s: schema %d -> %d", self.path, version, SCHEMA_VERSION)

    def _refuse_newer(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise SchemaTooNewError(
                f"memory database {self.path} has schema version {version}, newer than this "
                f"kernel-agent supports ({SCHEMA_VERSION}); upgrade kernel-agent or set "
                f"{ENV_VAR} to another file"
            )


def _first_line(value: object) -> str:
    lines = str(value).strip().splitlines()
    return lines[0] if lines else "database error"


def _is_busy(error: sqlite3.OperationalError) -> bool:
    message = str(error).lower()
    return "locked" in message or "busy" in message


def _is_not_corruption(error: sqlite3.OperationalError) -> bool:
    message = str(error).lower()
    return any(marker in message for marker in _NOT_CORRUPTION)


def _move_aside(path: Path) -> Path:
    """Rename the damaged file and its WAL/SHM companions; never delete the user's data."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    counter = 1
    while target.exists():
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{counter}")
        counter += 1
    # Companions first: once the main file is gone another process may create a fresh
    # database there, whose own -wal/-shm must not be swept away.
    for suffix in _SIDE_FILES:
        side = path.with_name(path.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            os.replace(side, target.with_name(target.name + suffix))
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, target)
    return target


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An advisory inter-process lock (a no-op where fcntl is missing)."""
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
