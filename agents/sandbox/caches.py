"""The persistent per-source caches under one root (`<cache dir>/build`): a run claims its own,
and a sweep keeps the whole root under a cap, least recently used first.

Why: each candidate source gets a cache of its own that outlives its run (its builds are
reused when the same source is judged again), so without a sweep every source ever judged
stays on the host. The per-run quota (agents/sandbox/quota.py) bounds one cache; the sweep
bounds how many there are.

One run at a time: a run holds an exclusive `flock` on its source's cache from launch to close
(in the launcher, never in the child). A second run of the same source while the first holds it
gets a private cache beside it (`<source hash>.run-<token>`, deleted at its close) instead of
waiting: the quota counts one run's files only, so one run's enforcement (the cache emptied)
can never hide another's cache bomb, and a claim never empties a cache another run is using.

Safe with evaluations running at once, in this process or in others: the sweep deletes a
directory only while it holds the exclusive lock, which it never waits for: a cache in use is
skipped. A cache touched in the last `IDLE_S` is skipped too (claimed a moment ago, or about
to be). The sweep deletes only directories directly under the root, never follows a link, and
removes a link (`<source hash>` -> `spare-<token>`, see agents/verify/spares.py) only once its
target is gone. Only the launcher writes the root itself: a child sees its own cache directory
and nothing above it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import time
import weakref
from pathlib import Path

from agents.sandbox.quota import Usage, directory_usage, empty_directory

ROOT_BYTES = 10 * 1024**3
ROOT_ENTRIES = 100_000
"""The whole root's cap: five caches at the per-source byte quota, or five at the file quota
(an honest torch.compile on the CPU leaves about 40 entries, a load_inline build about 10)."""
IDLE_S = 300.0
CLAIM_ATTEMPTS = 5
PRIVATE_MARK = ".run-"
"""Names a run's private cache: `<source hash>.run-<token>`."""

_MEASURED: dict[tuple[int, int], tuple[int, Usage]] = {}
"""Each cache directory's usage, by (device, inode), at the mtime it was counted at. A cache
changes only while a run claims it, and the claim's release touches it after the child is
dead, so an unchanged mtime means unchanged contents: a sweep counts again only the caches
used since the last one (a full count of a root at its cap takes about a second)."""


class CacheClaim:
    """A run's hold on its cache directory: an exclusive lock the sweep and other runs respect,
    held by an open descriptor in the launcher (close-on-exec: the child never inherits it).
    Released, a shared cache is touched (its mtime is its last use, whatever the child set it
    to) and a private one is deleted."""

    def __init__(self, path: Path, fd: int, *, private: bool = False) -> None:
        self.path = path
        self.private = private
        self._release = weakref.finalize(self, _let_go, fd, path if private else None)

    def release(self) -> None:
        self._release()


def _let_go(fd: int, private: Path | None) -> None:
    """Delete a private cache (still holding its lock: no sweep is inside it), or mark a shared
    one used now; then unlock."""
    if private is not None:
        shutil.rmtree(private, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.utime(fd)
    os.close(fd)


def claim_cache(path: Path, max_bytes: int, max_entries: int) -> CacheClaim:
    """Hold `path` (created if needed) for this run alone, mark it used now, and empty it when
    it is already over either quota (a smaller quota than the last run's, or a run killed
    before its close emptied it): the child then starts from a cache within its quota. When
    another run (or a sweep deleting it) holds `path`, the claim is on a fresh private cache
    beside it: `claim.path` is the directory the child must be given."""
    fd = _hold(path)
    if fd is None:  # in use: a cache of this run's own, never shared, never waited for
        private = path.with_name(f"{path.name}{PRIVATE_MARK}{secrets.token_hex(6)}")
        fd = _hold(private)
        if fd is None:
            raise OSError(f"the private cache directory {private} could not be held")
        return CacheClaim(private, fd, private=True)
    claim = CacheClaim(path, fd)
    os.utime(path)  # its last use, for the sweep
    if directory_usage(path, max_bytes, max_entries).over(max_bytes, max_entries):
        empty_directory(path)
    return claim


def _hold(path: Path) -> int | None:
    """Create `path` if needed and lock it exclusively without waiting: the open descriptor,
    or None when someone else holds it."""
    for _ in range(CLAIM_ATTEMPTS):
        path.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:  # a sweep deleted it just after mkdir: again
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        if _names(path, fd):  # else a sweep deleted it between mkdir and flock: again
            return fd
        os.close(fd)
    raise OSError(f"the cache directory {path} kept disappearing")


def _names(path: Path, fd: int) -> bool:
    """True when `path` still names the directory open as `fd`."""
    try:
        here, held = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)


def sweep_caches(
    root: Path,
    keep_bytes: int = ROOT_BYTES,
    keep_entries: int = ROOT_ENTRIES,
    idle_s: float = IDLE_S,
) -> list[Path]:
    """Delete the least recently used cache directories directly under `root` until the rest
    fit in `keep_bytes` and `keep_entries`, skipping any in use or used in the last `idle_s`;
    then remove links left pointing at nothing. A claim and its release touch its directory,
    so its mtime is its last use. Returns what was deleted."""
    try:
        with os.scandir(root) as scanner:
            listed = list(scanner)
    except OSError:
        return []
    caches: list[tuple[float, Usage, Path]] = []
    links: list[Path] = []
    for entry in listed:
        if entry.is_symlink():
            links.append(Path(entry.path))
        elif entry.is_dir(follow_symlinks=False):
            with contextlib.suppress(OSError):
                caches.append((*_measure(entry), Path(entry.path)))
    caches.sort(key=lambda item: item[0])
    total = Usage(sum(u.bytes for _, u, _ in caches), sum(u.entries for _, u, _ in caches))
    deleted = []
    for mtime, used, path in caches:
        if not total.over(keep_bytes, keep_entries) or time.time() - mtime < idle_s:
            break  # within the cap, or this one and every later one used too recently
        if _delete_unless_in_use(path):
            total = Usage(total.bytes - used.bytes, total.entries - used.entries)
            deleted.append(path)
    for link in links:
        with contextlib.suppress(OSError):
            if not link.exists():  # its target was swept (now or before)
                link.unlink()
    return deleted


def _measure(entry: os.DirEntry) -> tuple[float, Usage]:
    """A cache directory's last use and usage, counted again only when it was used since."""
    info = entry.stat(follow_symlinks=False)
    key = (info.st_dev, info.st_ino)
    known = _MEASURED.get(key)
    if known is not None and known[0] == info.st_mtime_ns:
        return info.st_mtime, known[1]
    used = directory_usage(Path(entry.path))
    _MEASURED[key] = (info.st_mtime_ns, used)
    return info.st_mtime, used


def _delete_unless_in_use(path: Path) -> bool:
    """Delete the cache at `path` while holding its exclusive lock; False (and nothing
    deleted) when a run holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # claimed by a run
        if not _names(path, fd):
            return False
        held = os.fstat(fd)
        _MEASURED.pop((held.st_dev, held.st_ino), None)
        shutil.rmtree(path, ignore_errors=True)
        return True
    finally:
        os.close(fd)
