"""Exact line attribution: which line of the user's file issued each torch call.

torch.profiler's `with_stack=True` only names the enclosing `def` in torch 2.13, so we find
the line ourselves: every torch function, Tensor method and operator passes through
`__torch_function__` while a TorchFunctionMode is active, and there the calling frame still
knows its line. The call is wrapped in a `ka_line:<line>:<function>` profiler range, which
the aten ops it dispatches nest under.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

RANGE_PREFIX = "ka_line:"


@dataclass(frozen=True)
class LineKey:
    """A line of the user's file and the function it sits in."""

    line: int
    function: str

    @property
    def range_name(self) -> str:
        return f"{RANGE_PREFIX}{self.line}:{self.function}"


def parse_range(name: str) -> LineKey | None:
    """The LineKey a `ka_line:` range stands for, or None for any other range."""
    if not name.startswith(RANGE_PREFIX):
        return None
    line, _, function = name[len(RANGE_PREFIX) :].partition(":")
    try:
        return LineKey(int(line), function)
    except ValueError:
        return None


class LineRecorder(TorchFunctionMode):
    """While active, knows the user's line of the torch call in progress (`current`), and
    with `ranges=True` opens a profiler range named after it.

    Only the outermost call a user line issues is wrapped: torch functions that call other
    torch functions must not open a second, nested range.
    """

    def __init__(self, source_path: str, *, ranges: bool = True):
        super().__init__()
        self.source_path = source_path
        self.ranges = ranges
        self.current: LineKey | None = None
        self._depth = 0
        self._keys: dict[tuple[int, str], LineKey] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None) -> Any:
        kwargs = kwargs or {}
        if self._depth:
            return self._call(func, args, kwargs)
        key = self._caller()
        if key is None:
            return self._call(func, args, kwargs)
        self.current = key
        try:
            if not self.ranges:
                return self._call(func, args, kwargs)
            with torch.profiler.record_function(key.range_name):
                return self._call(func, args, kwargs)
        finally:
            self.current = None

    def _call(self, func, args, kwargs) -> Any:
        self._depth += 1
        try:
            return func(*args, **kwargs)
        finally:
            self._depth -= 1

    def _caller(self) -> LineKey | None:
        """The innermost frame of the user's file on the stack: the exact line."""
        frame = sys._getframe(2)
        while frame is not None:
            code = frame.f_code
            if code.co_filename == self.source_path and frame.f_lineno is not None:
                pair = (frame.f_lineno, code.co_name)
                key = self._keys.get(pair)
                if key is None:
                    key = self._keys[pair] = LineKey(*pair)
                return key
            frame = frame.f_back
        return None
