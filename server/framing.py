"""LSP base-protocol framing that no input can break: headers, then a body of Content-Length.

pygls' own loop (`pygls.io_.run_async`) trusts the header: `int()` of any digit string, then
one read of that many bytes, so `Content-Length: 99999999999999999999` ends the process with
OverflowError and `1000000000000000` with MemoryError, and a header line without a newline
is read into memory whole. Here every size is bounded: header lines and header blocks have a
limit, a body larger than `max_body` is never read (the frame is refused and the reader
skips ahead to the next `Content-Length:`), and a header it cannot read is reported once
and skipped the same way. The body itself is `server.dispatch`'s part.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

DEFAULT_MAX_BODY = 64 * 1024 * 1024
MAX_BODY_ENV = "KERNEL_AGENT_MAX_MESSAGE_BYTES"
MAX_HEADER_LINE = 4096
MAX_HEADER_LINES = 32
CHUNK = 64 * 1024
MARKER = b"Content-Length:"

Read = Callable[[int], Awaitable[bytes]]
"""Reads up to n bytes (b"" at end of input): `StreamReader.read`, or stdin in a thread."""


@dataclass(frozen=True)
class Frame:
    """One frame: its body, or why there is none (`error`; the reader has resynchronised)."""

    body: bytes | None = None
    error: str | None = None
    too_large: bool = False


def max_body_from_env(default: int = DEFAULT_MAX_BODY) -> int:
    """The body cap from KERNEL_AGENT_MAX_MESSAGE_BYTES (as --max-message-bytes), else default."""
    value = os.environ.get(MAX_BODY_ENV, "").strip()
    try:
        return parse_max_body(value) if value else default
    except ValueError:
        return default


def parse_max_body(value: str) -> int:
    """A --max-message-bytes value: bytes, or with a K/M/G suffix (powers of 1024)."""
    text = value.strip().upper().removesuffix("B")
    scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
    digits = text[:-1] if scale > 1 else text
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 15 or int(digits) <= 0:
        raise ValueError(f"expected a positive size such as 67108864 or 64M (got {value!r})")
    return int(digits) * scale


class FrameReader:
    """Frames from a byte stream, in bounded memory whatever the stream holds."""

    def __init__(self, read: Read, max_body: int = DEFAULT_MAX_BODY) -> None:
        self._read = read
        self.max_body = max_body
        self._buffer = bytearray()
        self._eof = False
        self._declared = ""
        self._skipping = False

    async def next_frame(self) -> Frame | None:
        """The next frame, or None at the end of the input. A refused frame is returned at
        once (its answer must not wait for more input); the skip follows on the next call."""
        if self._skipping:
            self._skipping = False
            if not await self._resync():
                return None
        header = await self._header_block()
        if header is None:
            return None
        if isinstance(header, str):
            self._skipping = True
            return Frame(error=header)
        if header > self.max_body:
            self._skipping = True
            return Frame(
                error=f"Content-Length {self._declared} exceeds the server's limit of "
                f"{self.max_body} bytes ({MAX_BODY_ENV} or --max-message-bytes)",
                too_large=True,
            )
        body = await self._take(header)
        return None if body is None else Frame(body=body)

    async def _header_block(self) -> int | str | None:
        """The Content-Length of the next header block, an error message, or None at EOF."""
        length: int | None = None
        lines = 0
        while True:
            line = await self._line()
            if line is None:
                return None if lines == 0 else "the input ended inside a header"
            if isinstance(line, str):
                return line
            if not line.strip():
                if lines == 0:
                    continue  # blank lines between frames: tolerated
                if length is None:
                    return "header without Content-Length"
                return length
            lines += 1
            if lines > MAX_HEADER_LINES:
                return f"more than {MAX_HEADER_LINES} header lines"
            name, colon, value = line.partition(b":")
            if not colon or not name.strip() or name != name.strip():
                return f"not a header line: {_show(line)}"
            if name.strip().lower() == b"content-length":
                text = value.strip()
                if not text.isdigit():
                    return f"Content-Length is not a non-negative integer: {_show(text)}"
                declared = int(text) if len(text) <= 19 else 10**19  # past any cap
                if length is not None and declared != length:
                    return "two different Content-Length headers"
                length, self._declared = declared, _show(text).strip("'")

    async def _line(self) -> bytes | str | None:
        """One header line (without its line break), an error for a too-long one, or None."""
        while True:
            end = self._buffer.find(b"\n", 0, MAX_HEADER_LINE + 1)
            if end >= 0:
                line = bytes(self._buffer[:end]).rstrip(b"\r")
                del self._buffer[: end + 1]
                return line
            if len(self._buffer) > MAX_HEADER_LINE:
                del self._buffer[: MAX_HEADER_LINE - len(MARKER)]  # the resync starts past it
                return f"a header line longer than {MAX_HEADER_LINE} bytes"
            if not await self._fill():
                if self._buffer:
                    self._buffer.clear()
                    return "the input ended inside a header"
                return None

    async def _take(self, n: int) -> bytes | None:
        """Exactly n bytes, or None when the input ends first."""
        while len(self._buffer) < n:
            if not await self._fill(n - len(self._buffer)):
                self._buffer.clear()
                return None
        body = bytes(self._buffer[:n])
        del self._buffer[:n]
        return body

    async def _resync(self) -> bool:
        """Drop input up to the next `Content-Length:` (kept); False at end of input."""
        while True:
            start = self._buffer.find(MARKER)
            if start >= 0:
                del self._buffer[:start]
                return True
            keep = len(MARKER) - 1
            if len(self._buffer) > keep:
                del self._buffer[:-keep]
            if not await self._fill():
                self._buffer.clear()
                return False

    async def _fill(self, want: int = CHUNK) -> bool:
        if self._eof:
            return False
        data = await self._read(max(min(want, 16 * CHUNK), CHUNK))
        if not data:
            self._eof = True
            return False
        self._buffer += data
        return True


def _show(raw: bytes) -> str:
    """A short printable excerpt of bytes for an error message."""
    text = raw[:60].decode("utf-8", "replace")
    return repr(text + ("…" if len(raw) > 60 else ""))
