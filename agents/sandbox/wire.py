"""Frames between the parent and a sandboxed worker: a JSON header, then raw bytes.

Why a format of our own: the parent must read what an untrusted candidate sends without ever
unpickling or executing it. A frame is `u32 header length | header JSON | payload bytes`,
where the header declares the payload's length. The parent reads with a deadline and refuses,
before reading a byte of payload, a header or a payload over the caps it was given; nothing in
a frame is ever interpreted as a verdict. No torch here: tensors are bytes plus a spec
(agents/verify/values.py turns them into tensors).
"""

from __future__ import annotations

import json
import os
import selectors
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HEADER_CAP = 1 << 20
"""Largest header a worker may send (specs of many tensors, an error text)."""
_LENGTH = struct.Struct(">I")
CHUNK = 1 << 20


class WireError(Exception):
    """The other side broke the protocol: a short read, an oversized or malformed frame."""


class Deadline(Exception):
    """The other side did not answer in time."""


class Cancelled(Exception):
    """The caller's cancel flag was raised while waiting."""


@dataclass
class Frame:
    """A decoded frame: its header and the payload bytes it declared."""

    header: dict[str, Any]
    payload: bytes = b""
    received_at: float = 0.0  # monotonic clock when the last byte arrived


@dataclass
class WaitPolicy:
    """When to give up on a read: a deadline that pauses extend, and a cancel flag."""

    timeout_s: float
    cancelled: Callable[[], bool] = lambda: False
    paused_s: Callable[[], float] = lambda: 0.0
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self._paused_at_start = self.paused_s()

    def remaining(self) -> float:
        paused = self.paused_s() - self._paused_at_start
        return self.started + self.timeout_s + paused - time.monotonic()


def encode(header: dict[str, Any], payload: bytes | bytearray | memoryview = b"") -> list[Any]:
    """The pieces of one frame, to be written in order (the payload is not copied)."""
    body = json.dumps({**header, "payload": len(payload)}, separators=(",", ":")).encode()
    return [_LENGTH.pack(len(body)), body, payload]


def write_frame(fd: int, header: dict[str, Any], payload: bytes | memoryview = b"") -> None:
    """Blocking write of a whole frame (the worker's side, and the parent's requests)."""
    for piece in encode(header, payload):
        view = memoryview(piece).cast("B")
        while view:
            written = os.write(fd, view[:CHUNK])
            view = view[written:]


def read_frame(fd: int, policy: WaitPolicy, payload_cap: int) -> Frame:
    """Read one frame, refusing caps before reading, honouring the deadline and the cancel
    flag. Raises Deadline, Cancelled or WireError (EOF counts as a WireError)."""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        reader = _Reader(fd, selector, policy)
        (length,) = _LENGTH.unpack(reader.exactly(_LENGTH.size))
        if length > HEADER_CAP:
            raise WireError(f"a header of {length} bytes (the cap is {HEADER_CAP})")
        try:
            header = json.loads(reader.exactly(length))
        except (ValueError, UnicodeDecodeError):
            raise WireError("a header that is not JSON") from None
        if not isinstance(header, dict):
            raise WireError("a header that is not a JSON object")
        size = header.get("payload", 0)
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise WireError("a header with a malformed payload length")
        if size > payload_cap:
            raise WireError(f"a payload of {size} bytes where at most {payload_cap} were expected")
        payload = reader.exactly(size) if size else b""
        return Frame(header, payload, time.monotonic())


class _Reader:
    def __init__(self, fd: int, selector: selectors.BaseSelector, policy: WaitPolicy) -> None:
        self.fd, self.selector, self.policy = fd, selector, policy

    def exactly(self, size: int) -> bytes:
        buffer = bytearray(size)
        view = memoryview(buffer)
        got = 0
        while got < size:
            try:
                count = os.readv(self.fd, [view[got : got + CHUNK]])
            except BlockingIOError:
                count = -1
            if count == 0:
                raise WireError("the worker closed its channel")
            if count > 0:
                got += count
                continue
            self._wait()
        return bytes(buffer) if size < CHUNK else buffer  # type: ignore[return-value]

    def _wait(self) -> None:
        while True:
            if self.policy.cancelled():
                raise Cancelled()
            remaining = self.policy.remaining()
            if remaining <= 0:
                raise Deadline()
            if self.selector.select(timeout=min(remaining, 0.1)):
                return


def set_nonblocking(fd: int) -> None:
    os.set_blocking(fd, False)


def widen_pipe(fd: int, size: int = 1 << 20) -> None:
    """A 1 MiB pipe buffer (Linux F_SETPIPE_SZ): big tensors cross in fewer wake-ups."""
    try:
        import fcntl

        fcntl.fcntl(fd, 1031, size)  # F_SETPIPE_SZ
    except (OSError, ImportError):
        pass
