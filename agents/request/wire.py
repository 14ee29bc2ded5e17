"""Requests as JSON and back, checked field by field, for crossing a process boundary
(the language server hands its worker an `OptimizeRequest.to_json()`).

Why typed on the way in: a value of the wrong type would otherwise surface deep inside a
search as a traceback; here it is one line that names the setting (`search.beam must be a
whole number`).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agents.request.settings import RequestError
from agents.task import SourceFile


def to_json(value: Any) -> Any:
    """Plain JSON data: dataclasses as objects of their fields, paths as strings."""
    if isinstance(value, SourceFile):
        return {"text": value.text, "path": value.path}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def from_json(cls: type, data: Any, where: str = "") -> Any:
    """An instance of the dataclass `cls` from `to_json`'s output; missing fields take their
    defaults, an unknown or mistyped one raises RequestError naming it."""
    if cls is SourceFile:
        if not isinstance(data, Mapping) or not isinstance(data.get("text"), str):
            raise RequestError(f"{where or 'source'} must be an object with its text")
        return SourceFile(data["text"], _optional_str(data.get("path"), f"{where}.path"))
    if not isinstance(data, Mapping):
        raise RequestError(f"{where or cls.__name__} must be an object")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    values = {}
    for key, item in data.items():
        name = f"{where}.{key}" if where else str(key)
        if key not in names:
            raise RequestError(f"unknown setting {name}")
        values[key] = convert(hints[key], item, name)
    try:
        return cls(**values)
    except TypeError as error:  # a required field left out
        raise RequestError(f"{where or cls.__name__}: {error}") from None


def convert(hint: Any, value: Any, where: str) -> Any:
    """`value` checked against the type `hint` (and converted: str → Path, int → float)."""
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return convert(options[0], value, where)
    if origin in (Mapping, dict) or hint is Mapping:
        if not isinstance(value, Mapping):
            raise RequestError(f"{where} must be a table")
        _, item_hint = typing.get_args(hint) or (str, Any)
        return {str(k): convert(item_hint, v, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(hint) or hint is SourceFile:
        return from_json(hint, value, where)
    return _scalar(hint, value, where)


def _scalar(hint: Any, value: Any, where: str) -> Any:
    if hint is Any:
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise RequestError(f"{where} must be true or false (got {value!r})")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RequestError(f"{where} must be a whole number (got {value!r})")
        return value
    if hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value):
            raise RequestError(f"{where} must be a number (got {value!r})")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise RequestError(f"{where} must be a string (got {value!r})")
        return value
    if hint is Path:
        if not isinstance(value, str | Path) or not str(value):
            raise RequestError(f"{where} must be a path (got {value!r})")
        return Path(value).expanduser()
    raise RequestError(f"{where}: values of type {hint} cannot be read")


def _optional_str(value: Any, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise RequestError(f"{where} must be a string")
    return value
