"""Whether a call left its arguments as the reference's call left them: the parent decides.

Why here: the candidate's worker used to report a checksum of its own arguments, and a worker
patched through strings (invisible to the static checker) reported the checksum of a pristine
copy while its kernel wrote into the caller's input. Now each worker sends its arguments as
bytes (the `fetch` request with `args`) and the parent compares them value for value: the
same numbers, NaN where NaN was (the old rule, equal checksums to 1e-9 relative, asked no less
in practice: one rounding step moves a float32 sum by more). What the candidate's process
sends is data, never a finding.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from agents.verify import values
from agents.verify.side import flatten


def changed_arguments(cand: values.Unpacked, ref: values.Unpacked) -> str | None:
    """Why the candidate's arguments after its call are not the reference's after its call,
    or None when they are."""
    mine, theirs = _arguments(cand), _arguments(ref)
    if mine is None or theirs is None or len(mine) != len(theirs):
        return "its arguments came back in another structure than they were passed"
    for index, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        if isinstance(a, values.NonPlain) or isinstance(b, values.NonPlain):
            if a != b:
                return f"argument {index} is no longer the plain tensor it was"
        elif isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            return f"argument {index} changed its type"
        elif isinstance(a, torch.Tensor) and (a.dtype != b.dtype or a.shape != b.shape):
            return f"argument {index} changed its dtype or shape"
        elif not _same(a, b):
            return f"it changed its input {index} (the reference leaves it as it was)"
    return None


def _arguments(unpacked: values.Unpacked) -> list[Any] | None:
    value = unpacked.value
    if not isinstance(value, dict) or not isinstance(value.get("args"), list | tuple):
        return None
    return flatten(list(value["args"]))


def _same(a: Any, b: Any) -> bool:
    """The same values: bit for bit, or equal numbers with NaN where NaN was."""
    if isinstance(a, torch.Tensor):
        if a.numel() == 0 or torch.equal(_bytes_of(a), _bytes_of(b)):
            return True
        if not (a.is_floating_point() or a.is_complex()):
            return False
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous().reshape(-1).view(torch.uint8)
