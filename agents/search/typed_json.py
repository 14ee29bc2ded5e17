"""Read a dataclass back from the JSON its `to_json` wrote, checking each value against the
field's type. The search's events and results cross a process boundary (the editor's worker)
and a file (saved trajectories): what comes back must be what went out, or one clear line
saying which field is wrong, never a half-built object that fails later.

Floats follow the wire's rule: NaN and infinities travel as null (JSON has no other
spelling), so a null in a plain `float` field reads back as NaN.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any


class JSONShapeError(ValueError):
    """A value that is not what the field holds; the message names the field."""


def read_fields(cls: type, data: Any, where: str, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The dataclass `cls`'s fields from `data`, converted and checked; keys that are not
    fields are ignored (derived values such as a result's `tokens`). Fields with a default
    may be missing; fields in `skip` are left to the caller."""
    if not isinstance(data, Mapping):
        raise JSONShapeError(f"{where} must be a JSON object, not {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if not field.init or field.name in skip:
            continue
        if field.name not in data:
            no_default = field.default is dataclasses.MISSING
            if no_default and field.default_factory is dataclasses.MISSING:
                raise JSONShapeError(f"{where} has no {field.name}")
            continue
        values[field.name] = convert(hints[field.name], data[field.name], f"{where}.{field.name}")
    return values


def convert(kind: Any, value: Any, where: str) -> Any:
    """`value` as type `kind` (str, int, float, bool, None, unions of them, list, tuple, dict,
    Any, or a class with `from_json`); JSONShapeError otherwise."""
    if kind is Any:
        return value
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return _union(typing.get_args(kind), value, where)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise JSONShapeError(f"{where} must be a list")
        args = typing.get_args(kind)
        item = args[0] if args else Any
        items = [convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict or kind is dict:
        if not isinstance(value, Mapping):
            raise JSONShapeError(f"{where} must be an object")
        return dict(value)
    if kind is type(None):
        if value is not None:
            raise JSONShapeError(f"{where} must be null")
        return None
    return _scalar(kind, value, where)


def _union(options: tuple[Any, ...], value: Any, where: str) -> Any:
    if value is None:
        if type(None) in options:
            return None
        if float in options:
            return math.nan
        raise JSONShapeError(f"{where} must not be null")
    for option in options:
        if option is type(None):
            continue
        try:
            return convert(option, value, where)
        except JSONShapeError:
            continue
    names = " or ".join(getattr(o, "__name__", str(o)) for o in options)
    raise JSONShapeError(f"{where} must be {names} ({value!r:.60})")


def _scalar(kind: Any, value: Any, where: str) -> Any:
    if kind is bool:
        if not isinstance(value, bool):
            raise JSONShapeError(f"{where} must be true or false ({value!r:.60})")
        return value
    if kind is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise JSONShapeError(f"{where} must be a whole number ({value!r:.60})")
        return value
    if kind is float:
        if value is None:
            return math.nan  # the wire's spelling of NaN and the infinities
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise JSONShapeError(f"{where} must be a number ({value!r:.60})")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise JSONShapeError(f"{where} must be a string ({value!r:.60})")
        return value
    reader = getattr(kind, "from_json", None)
    if reader is None:
        raise TypeError(f"{where}: no JSON reader for {kind!r}")
    try:
        return reader(value)
    except JSONShapeError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise JSONShapeError(f"{where}: {error}") from None


def finite(value: Any) -> Any:
    """`value` with NaN and infinities as None, for JSON that any reader accepts."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value
