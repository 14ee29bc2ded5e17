"""What a forked child does as root before bubblewrap starts: stage the binds uid 65534
cannot reach, then drop to that uid.

Why a module of its own: both the jail's probe and every real launch run this same preexec
step (a probe that started children differently would vouch for a mode that then fails), and
both the jail and the launcher sit above it.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Sequence

SANDBOX_ID = 65534
"""The uid and gid a jailed child runs as (`nobody`)."""

CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18


# libc's mount and unshare, looked up once in the parent: a forked child must not dlopen.
def _load_libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


LIBC = _load_libc()


def drop_and_stage(stage: Sequence[tuple[str, str]], drop_ids: bool) -> None:
    """In the forked child, before bubblewrap: as root, bind what uid 65534 cannot reach onto
    the staging mountpoints (`stage`: source, mountpoint) in a mount namespace of its own
    (nothing leaks to the host), then drop to uid/gid 65534 with no supplementary groups."""
    if stage:
        if LIBC is None or LIBC.unshare(CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) for staging")
        if LIBC.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            raise OSError(ctypes.get_errno(), "making / private for staging")
        for source, target in stage:
            if LIBC.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None) != 0:
                raise OSError(ctypes.get_errno(), f"staging {source}")
    if drop_ids:
        os.setgroups([])
        os.setgid(SANDBOX_ID)
        os.setuid(SANDBOX_ID)
