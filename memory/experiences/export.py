"""Experiences as a shareable JSON file: a schema-versioned export, validated whole on import.

The file is the memory's only exchange format, so a reader checks every field and names the
first problem in one line (`MemoryFileError`) instead of storing half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from memory.experiences.lessons import Experience

EXPORT_FORMAT = "kernel-agent.experiences"
EXPORT_VERSION = 1


class MemoryFileError(ValueError):
    """An export file that cannot be imported; the message is one line naming the file."""


def write_export(path: str | os.PathLike[str], experiences: list[Experience]) -> int:
    """Write the entries to a schema-versioned JSON file (atomically); returns the count."""
    payload = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "experiences": [exp.to_json() for exp in experiences],
    }
    target = Path(path)
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=target.parent, prefix=target.name, delete=False
    ) as handle:
        json.dump(payload, handle, indent=1)
    os.replace(handle.name, target)
    return len(experiences)


def read_export(path: str | os.PathLike[str]) -> list[Experience]:
    """Parse an export file; any problem is a one-line `MemoryFileError` naming the file."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise MemoryFileError(f"{name}: cannot read: {error}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise MemoryFileError(
            f"{name}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})"
        ) from None
    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise MemoryFileError(f"{name}: not a kernel-agent experiences export")
    version = data.get("version")
    if not isinstance(version, int) or version < 1:
        raise MemoryFileError(f"{name}: missing or invalid 'version'")
    if version > EXPORT_VERSION:
        raise MemoryFileError(
            f"{name}: export version {version} is newer than this kernel-agent reads "
            f"({EXPORT_VERSION})"
        )
    items = data.get("experiences")
    if not isinstance(items, list):
        raise MemoryFileError(f"{name}: 'experiences' is not a list")
    result = []
    for position, item in enumerate(items):
        try:
            result.append(Experience.from_json(item))
        except (ValueError, TypeError) as error:
            raise MemoryFileError(f"{name}: experiences[{position}]: {error}") from None
    return result
