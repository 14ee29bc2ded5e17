"""Python values with tensors in them, as a JSON tree plus raw tensor bytes, and back.

Why: outputs, inputs' fingerprints, init arguments and state dicts cross between the
reference's process, the parent and the candidate's process as data. The tree admits only
None, bools, ints, floats, strings, lists, tuples, dicts and tensors of a fixed set of dtypes;
anything else is refused by name, so decoding never runs code. A tensor's spec says what it
was (plain, a subclass, meta, sparse) so the parent can refuse what is not a plain tensor
without trusting the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}
NAMES = {dtype: name for name, dtype in DTYPES.items()}
MAX_DEPTH = 32


class ValueRefused(ValueError):
    """A value that cannot cross (a type we do not carry, a malformed tree or spec)."""


@dataclass(frozen=True)
class TensorSpec:
    """What a tensor leaf was, before it was made into bytes."""

    dtype: str
    shape: tuple[int, ...]
    device: str
    kind: str  # "tensor" | "subclass" | "meta" | "sparse" | "other-layout"

    @property
    def nbytes(self) -> int:
        if self.kind != "tensor":
            return 0
        return math.prod(self.shape) * _itemsize(self.dtype)

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype,
            "shape": list(self.shape),
            "device": self.device,
            "kind": self.kind,
        }

    @classmethod
    def from_json(cls, data: Any) -> TensorSpec:
        try:
            dtype, shape = data["dtype"], data["shape"]
            device, kind = str(data["device"])[:64], str(data["kind"])[:32]
        except (KeyError, TypeError):
            raise ValueRefused("a tensor spec without dtype, shape, device or kind") from None
        if dtype not in DTYPES:
            raise ValueRefused(f"a tensor of unsupported dtype {str(dtype)[:32]!r}")
        if not isinstance(shape, list) or len(shape) > 16:
            raise ValueRefused("a tensor spec with a malformed shape")
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            raise ValueRefused("a tensor spec with a malformed shape")
        return cls(dtype, tuple(shape), device, kind)


def _itemsize(dtype: str) -> int:
    return torch.empty((), dtype=DTYPES[dtype]).element_size()


# -- the sending side ---------------------------------------------------------------------------


def pack(
    value: Any, *, dtype: torch.dtype | None = None, bare: bool = False
) -> tuple[Any, list[dict], bytes]:
    """(tree, specs, payload) for a value; `dtype` upcasts floating tensors as they go. With
    `bare`, tensors are described and not sent (an empty payload): an output's bytes then
    cross in parts (`part_bytes`), so no process on the way holds all of them at once."""
    leaves: list[torch.Tensor | None] = []
    specs: list[TensorSpec] = []

    def walk(item: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise ValueRefused("a value nested too deeply")
        if isinstance(item, torch.Tensor):
            spec, data = _tensor_leaf(item, dtype, bare)
            specs.append(spec)
            leaves.append(data)
            return {"T": len(specs) - 1}
        if item is None or isinstance(item, bool | str):
            return item
        if isinstance(item, int):
            return {"I": str(item)} if abs(item) >= 2**53 else item
        if isinstance(item, float):
            return item if math.isfinite(item) else {"F": repr(item)}
        if isinstance(item, torch.dtype):
            return {"dtype": NAMES.get(item, str(item))}
        if isinstance(item, tuple):
            return {"U": [walk(v, depth + 1) for v in item]}
        if isinstance(item, list):
            return {"L": [walk(v, depth + 1) for v in item]}
        if isinstance(item, dict):
            return {"D": [[_key(k), walk(v, depth + 1)] for k, v in item.items()]}
        raise ValueRefused(f"cannot pass a value of type {type(item).__name__}")

    tree = walk(value, 0)
    payload = b"".join(_raw(leaf) for leaf in leaves if leaf is not None)
    return tree, [spec.to_json() for spec in specs], payload


def _key(key: Any) -> str | int:
    if isinstance(key, str | int) and not isinstance(key, bool):
        return key
    raise ValueRefused(f"cannot pass a dict key of type {type(key).__name__}")


def _tensor_leaf(tensor: torch.Tensor, dtype: torch.dtype | None, bare: bool = False):
    kind = "tensor"
    if type(tensor) is not torch.Tensor and type(tensor) is not torch.nn.Parameter:
        kind = "subclass"
    elif tensor.is_meta:
        kind = "meta"
    elif tensor.is_sparse or tensor.layout != torch.strided:
        kind = "sparse" if tensor.is_sparse else "other-layout"
    if tensor.dtype not in NAMES:
        raise ValueRefused(f"cannot pass a tensor of dtype {tensor.dtype}")
    data = None
    out_dtype = tensor.dtype
    if kind == "tensor" and not bare:
        data = torch.Tensor.detach(tensor)
        if dtype is not None and data.is_floating_point():
            data = data.to(dtype)
            out_dtype = dtype
        data = data.to("cpu").contiguous()
    spec = TensorSpec(NAMES[out_dtype], tuple(tensor.shape), str(tensor.device), kind)
    return spec, data


def part_bytes(tensor: torch.Tensor, start: int, stop: int) -> memoryview:
    """Elements [start, stop) of a tensor in its flat (row-major) order, as bytes."""
    flat = torch.Tensor.detach(tensor).reshape(-1)
    return _raw(flat[start:stop].to("cpu").contiguous())


def _raw(tensor: torch.Tensor) -> memoryview:
    if tensor.numel() == 0:
        return memoryview(b"")
    return memoryview(tensor.reshape(-1).view(torch.uint8).numpy())


# -- the receiving side -------------------------------------------------------------------------


@dataclass(frozen=True)
class NonPlain:
    """A tensor leaf that was not a plain strided tensor: only its spec crossed."""

    spec: TensorSpec


@dataclass(frozen=True)
class Bare:
    """A plain tensor leaf known by its spec alone: its bytes are fetched in parts, which
    name it by its place among the value's leaves in `flatten` order."""

    spec: TensorSpec


@dataclass
class Unpacked:
    """A decoded value, the specs of its tensor leaves in payload order, and the spec of each
    decoded tensor by identity (its device and kind, which the bytes do not carry)."""

    value: Any
    specs: list[TensorSpec]
    by_id: dict[int, TensorSpec]

    def spec_of(self, leaf: Any) -> TensorSpec | None:
        if isinstance(leaf, NonPlain | Bare):
            return leaf.spec
        return self.by_id.get(id(leaf))


def expected_bytes(specs: list[dict]) -> int:
    return sum(TensorSpec.from_json(spec).nbytes for spec in specs)


def unpack(tree: Any, specs_json: Any, payload: bytes | bytearray, bare: bool = False) -> Unpacked:
    """Rebuild a value on the CPU. Tensors that were not plain come back as NonPlain, with
    their spec saying what they were; the payload must be exactly as long as the specs say.
    With `bare` (a value packed bare), plain tensors come back as `Bare` leaves."""
    if not isinstance(specs_json, list):
        raise ValueRefused("tensor specs that are not a list")
    specs = [TensorSpec.from_json(spec) for spec in specs_json]
    if (0 if bare else sum(spec.nbytes for spec in specs)) != len(payload):
        raise ValueRefused("a payload whose length does not match its tensor specs")
    buffer = payload if isinstance(payload, bytearray) else bytearray(payload)
    tensors: list[torch.Tensor | NonPlain | Bare] = []
    by_id: dict[int, TensorSpec] = {}
    offset = 0
    for spec in specs:
        if spec.kind != "tensor":
            tensors.append(NonPlain(spec))
            continue
        if bare:
            tensors.append(Bare(spec))
            continue
        dtype = DTYPES[spec.dtype]
        count = math.prod(spec.shape)
        if count == 0:
            tensor = torch.empty(spec.shape, dtype=dtype)
        else:
            flat = torch.frombuffer(buffer, dtype=dtype, count=count, offset=offset)
            tensor = flat.reshape(spec.shape)
            offset += spec.nbytes
        by_id[id(tensor)] = spec
        tensors.append(tensor)

    def walk(node: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise ValueRefused("a value nested too deeply")
        if node is None or isinstance(node, bool | int | float | str):
            return node
        if isinstance(node, dict) and len(node) == 1:
            ((tag, body),) = node.items()
            if tag == "T" and isinstance(body, int) and 0 <= body < len(tensors):
                return tensors[body]
            if tag == "I" and isinstance(body, str) and body.lstrip("-").isdigit():
                return int(body)
            if tag == "F" and body in ("inf", "-inf", "nan"):
                return float(body)
            if tag == "dtype" and body in DTYPES:
                return DTYPES[body]
            if tag in ("U", "L") and isinstance(body, list):
                items = [walk(v, depth + 1) for v in body]
                return tuple(items) if tag == "U" else items
            if tag == "D" and isinstance(body, list):
                pairs = [pair for pair in body if isinstance(pair, list) and len(pair) == 2]
                if len(pairs) != len(body):
                    raise ValueRefused("a malformed dict")
                if not all(isinstance(key, str | int) for key, _ in pairs):
                    raise ValueRefused("a dict with a malformed key")
                return {key: walk(v, depth + 1) for key, v in pairs}
        raise ValueRefused("a malformed value tree")

    return Unpacked(walk(tree, 0), specs, by_id)
