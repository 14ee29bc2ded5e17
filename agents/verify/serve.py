"""Entry point of a sandboxed evaluation worker: answer the parent's requests, one at a time.

argv: [request fd, reply fd, role]. The worker imports torch, reads the parent's hello (device
and threads), starts its device and thread pools, answers, then serves frames
(agents/sandbox/wire.py) until the parent closes its end. Every answer is data (outputs,
fingerprints, sizes); none is a verdict. An exception in user code is answered as an error
line and the worker goes on serving, so the parent decides what it means.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any

HELD_OFF = {"prepare", "calls", "checksum"}
"""Requests the parent times, during which Python's cyclic collector is held off (see
agents/verify/timing.py, `collector_held_off`); it runs in the untimed requests after."""


def main(argv: list[str]) -> None:
    request_fd, reply_fd, role = int(argv[0]), int(argv[1]), argv[2]
    os.set_inheritable(request_fd, False)
    os.set_inheritable(reply_fd, False)
    # torch first, before the parent's hello: the import (about a second) overlaps the start
    # of the other worker and whatever the parent does meanwhile.
    import torch

    from agents.sandbox.wire import WaitPolicy, WireError, read_frame, write_frame
    from agents.verify.side import Side

    try:
        hello = read_frame(request_fd, WaitPolicy(timeout_s=float("inf")), payload_cap=0)
        options = hello.header
        side = Side(role, str(options["device"]), int(options["threads"]))
        answer = {"ok": True, "pid": os.getpid(), "torch": torch.__version__}
        write_frame(reply_fd, {**answer, "n": options.get("n")})
    except (WireError, OSError):
        _exit()
    serve(side, request_fd, reply_fd)


def serve(side, request_fd: int, reply_fd: int) -> None:
    from agents.sandbox.wire import WaitPolicy, WireError, read_frame, write_frame
    from agents.verify.side import SideError
    from agents.verify.timing import collector_held_off

    forever = WaitPolicy(timeout_s=float("inf"))
    while True:
        try:
            frame = read_frame(request_fd, forever, payload_cap=1 << 40)
        except (WireError, OSError):
            _exit()  # the parent is gone, or closed our channel: nothing left to answer
        op = frame.header.get("op")
        try:
            with collector_held_off() if op in HELD_OFF else contextlib.nullcontext():
                header, payload = handle(side, str(op), frame.header, frame.payload)
            answer = {"ok": True, **header}
        except SideError as error:
            answer, payload = {"ok": False, "error": str(error), "kind": error.kind}, b""
        except BaseException as error:  # the harness itself: still an answer, never silence
            text = f"{type(error).__name__}: {error}"[:2000]
            answer, payload = {"ok": False, "error": text, "kind": "harness"}, b""
        answer["n"] = frame.header.get("n")  # the request's nonce: no answer can be written ahead
        try:
            write_frame(reply_fd, answer, payload)
        except OSError:
            _exit()
        if op == "exit":
            _exit()


Answer = tuple[dict[str, Any], Any]
"""A reply's header and its payload: bytes, or a value packed with `values.pack`."""


def handle(side, op: str, header: dict[str, Any], payload: bytes) -> Answer:
    """The answer to one request: the ops both workers serve, then those of its role."""
    from agents.verify.side import SideError

    own = _REFERENCE_OPS if side.role == "reference" else _CANDIDATE_OPS
    answer = _COMMON_OPS.get(op) or own.get(op)
    if answer is None:
        raise SideError(f"unknown request {op[:40]!r} for the {side.role}", "protocol")
    return answer(side, header, payload)


def _packed(value: Any, **extra: Any) -> tuple[dict[str, Any], bytes]:
    from agents.verify import values

    tree, specs, data = values.pack(value)
    return {"tree": tree, "specs": specs, **extra}, data


def _received(header: dict[str, Any], payload: bytes) -> Any:
    from agents.verify import values

    return values.unpack(header.get("tree"), header.get("specs"), payload).value


def _nothing(side, header: dict[str, Any], payload: bytes) -> Answer:
    """`ping` and `exit` (which `serve` acts on once it is answered)."""
    return {}, b""


def _prepare(side, header: dict[str, Any], payload: bytes) -> Answer:
    """One input set (the trials), or one per call of a timed request."""
    answer = side.footprint() if header.get("footprint") else {}
    if header.get("seeds") is not None:
        side.prepare_calls([int(seed) for seed in header["seeds"]])
    else:
        side.prepare(int(header["seed"]))
    side.settle()  # inputs drawn on the device are finished before anything is timed
    return answer, b""


def _warm(side, header: dict[str, Any], payload: bytes) -> Answer:
    """One untimed call, right before a timed one, on inputs already seen (those of its last
    timed call: drawing afresh cost 20% of it)."""
    if not side.inputs:
        side.prepare(int(header["seed"]))
    side.run(clone=True, poison=False)  # a copy: a call that writes its inputs, repeated
    side.settle()
    return {}, b""


def _run(side, header: dict[str, Any], payload: bytes) -> Answer:
    side.run(bool(header.get("clone")), bool(header.get("poison")))
    return ({"changed": side.changes()} if header.get("check") else {}), b""


def _calls(side, header: dict[str, Any], payload: bytes) -> Answer:
    """A timed request: its calls, done only once all their outputs are summed."""
    from agents.verify.checksums import call_checksums

    side.run_calls()
    scales = _scales(header.get("scales"))
    answer = {"checksum": call_checksums(side.outputs, int(header["checksum"]), scales)}
    side.settle()
    return answer, b""


def _checksum(side, header: dict[str, Any], payload: bytes) -> Answer:
    """With `calls`, the overhead request (a timed one less its calls); with `band`, the
    reference's yardstick for the timed replies, untimed."""
    from agents.verify.checksums import call_bands, call_checksums, checksum, checksum_band

    seed, calls = int(header["seed"]), bool(header.get("calls"))
    scales = _scales(header.get("scales"))
    if header.get("band"):
        if calls:
            return {"band": call_bands(side.outputs, seed, scales)}, b""
        return {"band": checksum_band(side.output, seed, scales)}, b""
    if calls:
        side.pass_calls()
        sums = call_checksums(side.outputs, seed, scales)
    else:
        sums = checksum(side.output, seed, scales)
    side.settle()
    return {"checksum": sums}, b""


def _select(side, header: dict[str, Any], payload: bytes) -> Answer:
    """The call of the last timed request that a full comparison reads."""
    side.select(int(header["index"]))
    return {}, b""


def _fetch(side, header: dict[str, Any], payload: bytes) -> Answer:
    """The output, and the arguments as the call left them (the parent compares those).
    With `bare`, the output is described only (`out_tree`, `out_specs`): the parent reads
    its tensors' bytes in parts (`part`)."""
    from agents.verify import values

    output = side.previous if header.get("previous") else side.output
    args = side.args if header.get("args") else None
    if args is not None and header.get("args_sample") is not None:
        args = sampled_arguments(args, int(header["args_sample"]))
    if not header.get("bare"):
        return _packed({"out": output, "args": args})
    tree, specs, _ = values.pack(output, bare=True)
    return _packed({"args": args}, out_tree=tree, out_specs=specs)


def _part(side, header: dict[str, Any], payload: bytes) -> Answer:
    """Elements [start, stop) of one tensor leaf of an output, as bytes (`Side.part`)."""
    what, leaf = str(header.get("what")), int(header["leaf"])
    dtype, data = side.part(what, leaf, int(header["start"]), int(header["stop"]))
    return {"dtype": dtype}, data


def _capture(side, header: dict[str, Any], payload: bytes) -> Answer:
    return {"captured": side.capture()}, b""


def _uncapture(side, header: dict[str, Any], payload: bytes) -> Answer:
    side.graph = None
    return {}, b""


def _changes(side, header: dict[str, Any], payload: bytes) -> Answer:
    return {"changed": side.changes()}, b""


def _load(side, header: dict[str, Any], payload: bytes) -> Answer:
    answer, value = side.load_reference(header)
    return _packed(value, **answer)


def _anchor(side, header: dict[str, Any], payload: bytes) -> Answer:
    """The float64 anchor: at a sample of each large leaf (`sample_seed`), described only
    (`bare`: its bytes are then read in parts), or whole."""
    from agents.verify import values

    gold = side.anchor()
    if gold is not None and header.get("bare"):
        tree, specs, _ = values.pack(gold, bare=True)
        return {"present": True, "tree": tree, "specs": specs}, b""
    if gold is None or header.get("sample_seed") is None:
        return _packed(gold, present=gold is not None)
    leaves, sampled = sample_leaves(gold, int(header["sample_seed"]))
    return _packed(leaves, present=True, sampled=sampled)


def _perturb(side, header: dict[str, Any], payload: bytes) -> Answer:
    return _packed(side.perturb(int(header["seed"])))


def _commitment_scales(side, header: dict[str, Any], payload: bytes) -> Answer:
    """The commitments' per-leaf scales, from the last output the reference made."""
    from agents.verify.checksums import commitment_scales

    return {"scales": commitment_scales(side.output)}, b""


def _recommit(side, header: dict[str, Any], payload: bytes) -> Answer:
    """An opening: the commitment of bytes another worker returned, sent with this request
    or, with `taken`, before it in parts (`take`)."""
    if header.get("taken"):
        value, side.taken = side.taken, None
        return {"checksum": recommitted(side, header, {"out": value})}, b""
    return {"checksum": recommitted(side, header, _received(header, payload))}, b""


def _take(side, header: dict[str, Any], payload: bytes) -> Answer:
    """Another worker's output, received in parts for an opening: `begin` with its tree and
    specs (room for it is made here, not in the parent), then `leaf`, `start` and the bytes
    of each part."""
    import torch

    from agents.verify import values
    from agents.verify.side import SideError, flatten

    if header.get("begin"):
        specs = [values.TensorSpec.from_json(spec) for spec in header.get("specs") or []]
        room = bytearray(sum(spec.nbytes for spec in specs))
        side.taken = values.unpack(header.get("tree"), header.get("specs"), room).value
        return {}, b""
    leaves = flatten(side.taken)
    leaf, start = int(header["leaf"]), int(header["start"])
    if side.taken is None or not 0 <= leaf < len(leaves):
        raise SideError("a part of an output that was never begun", "protocol")
    flat = leaves[leaf].reshape(-1)
    part = torch.frombuffer(bytearray(payload), dtype=flat.dtype) if payload else flat[:0]
    flat[start : start + part.numel()].copy_(part)
    return {}, b""


def _build(side, header: dict[str, Any], payload: bytes) -> Answer:
    return side.build_candidate(header, _received(header, payload)), b""


def _load_state(side, header: dict[str, Any], payload: bytes) -> Answer:
    side.load_state(_received(header, payload))
    return {}, b""


Op = Callable[[Any, dict[str, Any], bytes], Answer]
_COMMON_OPS: dict[str, Op] = {
    "ping": _nothing,
    "prepare": _prepare,
    "warm": _warm,
    "run": _run,
    "calls": _calls,
    "checksum": _checksum,
    "select": _select,
    "fetch": _fetch,
    "part": _part,
    "capture": _capture,
    "uncapture": _uncapture,
    "changes": _changes,
    "exit": _nothing,
}
_REFERENCE_OPS: dict[str, Op] = {
    "load": _load,
    "anchor": _anchor,
    "perturb": _perturb,
    "scales": _commitment_scales,
    "recommit": _recommit,
    "take": _take,
}
_CANDIDATE_OPS: dict[str, Op] = {"build": _build, "load_state": _load_state}


def _scales(raw: Any) -> list[float] | None:
    if not isinstance(raw, list):
        return None
    return [float(scale) if isinstance(scale, int | float) else 1.0 for scale in raw]


def recommitted(side, header: dict[str, Any], value: Any) -> list[Any]:
    """What call `call` of a timed request of `calls` commits to, for an output the parent
    fetched from the candidate and sent here as bytes: the reference's process recomputes
    the candidate's claim on its own device, with the same code and the same key."""
    from agents.verify.checksums import recommit
    from agents.verify.side import to_device

    output = value.get("out") if isinstance(value, dict) else value
    output = to_device(output, side.device)
    calls, call = int(header["calls"]), int(header["call"])
    return recommit(output, int(header["seed"]), _scales(header.get("scales")), calls, call)


def sample_leaves(gold: Any, seed: int) -> tuple[list[Any], list[int | None]]:
    """Each output leaf of the float64 anchor, large tensors cut to the parent's sample
    (`compare.sample_indices` with seed + the leaf's index), and the element count each
    sample was drawn from (None for a leaf sent whole)."""
    import torch

    from agents.verify import compare
    from agents.verify.side import flatten

    leaves, sampled = [], []
    for index, leaf in enumerate(flatten(gold)):
        picks = None
        if isinstance(leaf, torch.Tensor) and leaf.layout == torch.strided:
            picks = compare.sample_indices(leaf.numel(), seed + index)
        if picks is None:
            leaves.append(leaf)
            sampled.append(None)
        else:
            leaves.append(leaf.reshape(-1)[picks.to(leaf.device)])
            sampled.append(leaf.numel())
    return leaves, sampled


def sampled_arguments(args: Any, seed: int) -> list[Any]:
    """The arguments as the parent compares them when they are large: each leaf of more than
    `compare.ANCHOR_SAMPLE` elements cut to the elements at indices drawn from `seed` (which
    the parent sends only with this request, after the call), followed by its shape. Both
    sides cut alike, so the parent compares like with like without moving every input's
    bytes through a pipe twice a trial: an in-place kernel writes far more than it could
    hope to keep out of a random sample."""
    import torch

    leaves, _ = sample_leaves(args, seed)
    out: list[Any] = []
    for cut, whole in zip(leaves, _flat(args), strict=True):
        out.append(cut)
        if isinstance(whole, torch.Tensor):
            out.append([int(size) for size in whole.shape])
    return out


def _flat(value: Any) -> list[Any]:
    from agents.verify.side import flatten

    return flatten(value)


def _exit() -> None:
    """Leave at once: no atexit hook or lingering thread of user code runs after us."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
