"""How the parent reads and compares outputs during a verdict: described first, then their
tensors part by part (agents/verify/streamed.py), so its memory stays flat whatever their size.

Why apart from the protocol (agents/verify/judge.py, which mixes this in): the trials and the
timed full checks share every step of it, and the judge keeps to the protocol's order.
"""

from __future__ import annotations

import contextlib
from typing import Any

from agents.sandbox.wire import Frame
from agents.verify import compare, values
from agents.verify.outputs import Anchor, check_structure, judge_parts, mismatch_reason
from agents.verify.side import flatten
from agents.verify.streamed import as_tensor
from agents.verify.verdict import Verdict

SLACK_BYTES = 1 << 20


class Refusal(Exception):
    """Stops the protocol with a verdict and a reason."""

    def __init__(self, verdict: Verdict, reason: str) -> None:
        super().__init__(reason)
        self.verdict = verdict
        self.reason = reason


class OutputReading:
    """The judge's reading of outputs. It uses the judge's `request`, `_ref`, `_cand` and
    `_within`, and keeps `comparisons`, `args_sample`, `expected_bytes`, `leaf_specs` (the
    reference's output leaves) and `forward` (an opening: the candidate's parts go on to the
    reference too)."""

    def _fetch_reference(self, args: bool = False) -> values.Unpacked:
        """The reference's output described (its bytes are read in parts as they are
        compared) and, with `args`, its arguments after the call."""
        sample = self.args_sample if args else None
        with self._within("compare"):
            frame = self._ref("fetch", args=args, args_sample=sample, bare=True)
        unpacked = described(frame)
        self.expected_bytes = len(frame.payload)
        return unpacked

    def _fetch_candidate(self, previous: bool = False, args: bool = False) -> values.Unpacked:
        """The output described (with `args`, the arguments too, as data); the cap is the
        reference's last fetch, which carried its arguments when this one does."""
        cap = self.expected_bytes + SLACK_BYTES
        with self._within("compare"):
            frame = self._cand(
                "fetch",
                self.request.run_timeout_s,
                payload_cap=cap,
                previous=previous,
                args=args,
                args_sample=self.args_sample if args else None,
                bare=True,
            )
        try:
            return described(frame)
        except values.ValueRefused as error:
            raise Refusal(Verdict.INCORRECT, f"its output cannot be read: {error}") from None

    def _gold(self, eager: bool, sample_seed: int | None = None) -> Anchor:
        return Anchor(self._anchor, eager, sample_seed, describe=self._describe_anchor)

    def _anchor(self, sample_seed: int | None) -> tuple[values.Unpacked | None, list]:
        """The float64 outputs, and per leaf the element count it was sampled from (None
        where it came whole)."""
        with self._within("anchor"):
            frame = self._ref("anchor", sample_seed=sample_seed)
        if not frame.header.get("present"):
            return None, []
        gold = values.unpack(frame.header.get("tree"), frame.header.get("specs"), frame.payload)
        return gold, list(frame.header.get("sampled") or [])

    def _describe_anchor(self) -> values.Unpacked | None:
        """The whole float64 anchor, run in the reference's worker and described; its bytes
        are read in parts. None when an op has no float64 kernel."""
        with self._within("anchor"):
            frame = self._ref("anchor", bare=True)
        if not frame.header.get("present"):
            return None
        return values.unpack(frame.header.get("tree"), frame.header.get("specs"), b"", bare=True)

    def _reference_part(self, what: str, leaf: int, start: int, stop: int) -> Any:
        with self._within("anchor") if what == "anchor" else contextlib.nullcontext():
            frame = self._ref("part", what=what, leaf=leaf, start=start, stop=stop)
        return as_tensor(frame.payload, values.DTYPES[str(frame.header.get("dtype"))])

    def _candidate_part(self, what: str, leaf: int, start: int, stop: int) -> Any:
        """Elements [start, stop) of a candidate output's leaf, exactly as many bytes as the
        reference's leaf has there; during an opening they go on to the reference too."""
        spec = self.leaf_specs[leaf]
        assert spec is not None
        size = (stop - start) * torch_itemsize(spec.dtype)
        frame = self._cand(
            "part",
            self.request.run_timeout_s,
            payload_cap=size,
            what=what,
            leaf=leaf,
            start=start,
            stop=stop,
        )
        if len(frame.payload) != size:
            raise Refusal(
                Verdict.INCORRECT,
                f"its output cannot be read: a part of {len(frame.payload)} bytes, not {size}",
            )
        if self.forward:
            self._ref("take", leaf=leaf, start=start, payload=frame.payload)
        return as_tensor(frame.payload, values.DTYPES[spec.dtype])

    def _checked(self, label, outputs: dict, reference: values.Unpacked) -> dict[Any, list]:
        """Each output's leaves, once its structure matched the reference's."""
        expected = flatten(reference.value["out"])
        leaves = {}
        for when, output in outputs.items():
            if not isinstance(output.value, dict) or "out" not in output.value:
                raise Refusal(Verdict.INCORRECT, f"{label}: its output came back malformed")
            leaves[when] = flatten(output.value["out"])
            try:
                check_structure(leaves[when], output, expected, reference)
            except compare.OutputMismatch as mismatch:
                raise Refusal(Verdict.INCORRECT, f"{label}: {mismatch}") from None
        self.leaf_specs = [
            leaf.spec if isinstance(leaf, values.Bare) else None for leaf in expected
        ]
        return leaves

    def _compare(self, label, outputs: dict, reference, gold: Anchor, begin=None) -> None:
        """Compare each candidate output (`outputs`: "before"/"after" its second call, or
        None, the one output of a timed call) with the reference's, leaf by leaf, reading
        tensors part by part (agents/verify/streamed.py); `begin` runs once the structures
        matched, before any part is read."""
        leaves = self._checked(label, outputs, reference)
        if begin is not None:
            begin()
        whats = [{"before": "previous"}.get(when, "output") for when in outputs]
        expected = flatten(reference.value["out"])
        for index, ref in enumerate(expected):
            if isinstance(ref, values.Bare):
                results = judge_parts(
                    index,
                    ref.spec,
                    whats,
                    self._reference_part,
                    self._candidate_part,
                    gold,
                    len(expected),
                    self.request.device,
                )
            else:
                results = [compare.compare_output(leaves[w][index], ref, None) for w in outputs]
            for when, result in zip(outputs, results, strict=True):
                self.comparisons.append(result)
                if not result.ok:
                    raise Refusal(Verdict.INCORRECT, mismatch_reason(label, when, index, result))


def described(frame: Frame) -> values.Unpacked:
    """A `bare` fetch's answer: the output described (tensors as `values.Bare`) and the
    arguments as data, as one value {"out": ..., "args": ...}."""
    header = frame.header
    args = values.unpack(header.get("tree"), header.get("specs"), frame.payload)
    if not isinstance(args.value, dict) or set(args.value) != {"args"}:
        raise values.ValueRefused("arguments that came back malformed")
    out = values.unpack(header.get("out_tree"), header.get("out_specs"), b"", bare=True)
    value = {"out": out.value, "args": args.value["args"]}
    return values.Unpacked(value, out.specs + args.specs, {**out.by_id, **args.by_id})


def torch_itemsize(dtype: str) -> int:
    return values.TensorSpec(dtype, (1,), "cpu", "tensor").nbytes
