"""Whether a call left its arguments as the reference's call left them: the parent decides.

Why here: the candidate's worker used to report a checksum of its own arguments, and a worker
patched through strings (invisible to the static checker) reported the checksum of a pristine
copy while its kernel wrote into the caller's input. Now each worker sends its arguments as
bytes (the `fetch` request with `args`) and the parent compares them: bit for bit, and where
the bits differ (a reference that writes its own inputs, rounded another way by the
candidate) by the old rule, equal checksums to 1e-9 relative, computed here by the parent
under a seed no worker sees. What the candidate's process sends is data, never a finding.
"""

from __future__ import annotations

import math
import secrets
from typing import Any

import torch

from agents.verify import values
from agents.verify.checksums import checksum
from agents.verify.side import flatten


def changed_arguments(cand: values.Unpacked, ref: values.Unpacked) -> str | None:
    """Why the candidate's arguments after its call are not the reference's after its call,
    or None when they are."""
    mine = _arguments(cand)
    theirs = _arguments(ref)
    if mine is None or theirs is None or len(mine) != len(theirs):
        return "its arguments came back in another structure than they were passed"
    for index, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        if _plain(a) != _plain(b):
            return f"argument {index} is no longer a plain tensor"
        if isinstance(a, values.NonPlain) or isinstance(b, values.NonPlain):
            if a != b:
                return f"argument {index} changed its kind"
        elif isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            return f"argument {index} changed its type"
        elif isinstance(a, torch.Tensor) and (a.dtype != b.dtype or a.shape != b.shape):
            return f"argument {index} changed its dtype or shape"
    if all(_identical(a, b) for a, b in zip(mine, theirs, strict=True)):
        return None
    if not all(_plain(leaf) for leaf in mine + theirs):
        return "its arguments changed (the reference leaves them as they were)"
    seed = secrets.randbelow(2**31)
    if same_checksums(checksum(mine, seed), checksum(theirs, seed)):
        return None
    return "it changed its inputs (the reference leaves them as they were)"


def _arguments(unpacked: values.Unpacked) -> list[Any] | None:
    value = unpacked.value
    if not isinstance(value, dict) or not isinstance(value.get("args"), list | tuple):
        return None
    return flatten(list(value["args"]))


def _plain(leaf: Any) -> bool:
    return not isinstance(leaf, values.NonPlain)


def _identical(a: Any, b: Any) -> bool:
    """The same bits (NaN where NaN was), or equal plain values."""
    if isinstance(a, torch.Tensor):
        if a.numel() == 0:
            return True
        return torch.equal(_bytes_of(a), _bytes_of(b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous().reshape(-1).view(torch.uint8)


def same_checksums(cand: Any, ref: Any) -> bool:
    """Equal checksums (to rounding of the sum itself), leaf by leaf."""
    if not isinstance(cand, list) or not isinstance(ref, list) or len(cand) != len(ref):
        return False
    for mine, theirs in zip(cand, ref, strict=True):
        if not isinstance(mine, dict) or mine.get("kind") != theirs.get("kind"):
            return False
        if mine.get("numel") != theirs.get("numel") or mine.get("scalar") != theirs.get("scalar"):
            return False
        a, b = mine.get("sum"), theirs.get("sum")
        if isinstance(b, float) and isinstance(a, float | int):
            if not (abs(a - b) <= 1e-9 * (1.0 + abs(b)) or (math.isnan(a) and math.isnan(b))):
                return False
        elif a != b:
            return False
    return True
