"""The parent's side of the worker protocol: frames, caps, deadlines, and values as data.

A worker runs user code, so everything it sends is hostile until proven otherwise: the
parent reads frames with a deadline, refuses oversized ones before reading their payload,
and decodes values without ever executing or unpickling anything."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.sandbox.wire import (
    Cancelled,
    Deadline,
    WaitPolicy,
    WireError,
    read_frame,
    set_nonblocking,
    write_frame,
)
from agents.textsafe import clean_text
from agents.verify import values


def pipe():
    read, write = os.pipe()
    set_nonblocking(read)
    return read, write


def test_a_frame_round_trips_with_its_payload():
    read, write = pipe()
    write_frame(write, {"ok": True, "x": [1, 2]}, b"abc" * 1000)
    frame = read_frame(read, WaitPolicy(5.0), payload_cap=3000)
    assert frame.header["x"] == [1, 2] and frame.payload == b"abc" * 1000


def test_an_oversized_payload_is_refused_before_it_is_read():
    read, write = pipe()
    body = b'{"ok":true,"payload":999999999}'
    os.write(write, len(body).to_bytes(4, "big") + body)
    with pytest.raises(WireError, match="at most 10"):
        read_frame(read, WaitPolicy(5.0), payload_cap=10)


def test_a_header_over_the_cap_or_not_json_is_refused():
    read, write = pipe()
    os.write(write, (50_000_000).to_bytes(4, "big"))
    with pytest.raises(WireError, match="header"):
        read_frame(read, WaitPolicy(5.0), payload_cap=0)
    read, write = pipe()
    os.write(write, (5).to_bytes(4, "big") + b"]]]]]")
    with pytest.raises(WireError, match="not JSON"):
        read_frame(read, WaitPolicy(5.0), payload_cap=0)


def test_silence_ends_at_the_deadline_and_a_cancel_ends_it_sooner():
    read, _write = pipe()
    started = time.monotonic()
    with pytest.raises(Deadline):
        read_frame(read, WaitPolicy(0.3), payload_cap=0)
    assert 0.25 < time.monotonic() - started < 2
    flag = threading.Event()
    threading.Timer(0.2, flag.set).start()
    with pytest.raises(Cancelled):
        read_frame(read, WaitPolicy(30.0, cancelled=flag.is_set), payload_cap=0)


def test_time_a_pool_kept_the_worker_stopped_extends_the_deadline():
    read, write = pipe()
    paused = [0.0]
    threading.Timer(0.5, lambda: write_frame(write, {"ok": True})).start()
    policy = WaitPolicy(0.3, paused_s=lambda: paused[0])
    paused[0] = 1.0  # as if the pool had stopped it for a second meanwhile
    assert read_frame(read, policy, payload_cap=0).header["ok"] is True


def test_a_closed_channel_is_a_wire_error():
    read, write = pipe()
    os.close(write)
    with pytest.raises(WireError, match="closed"):
        read_frame(read, WaitPolicy(5.0), payload_cap=0)


TENSORS = st.builds(
    lambda shape, dtype, seed: _tensor(shape, dtype, seed),
    st.lists(st.integers(0, 4), max_size=3),
    st.sampled_from(list(values.DTYPES)),
    st.integers(0, 1000),
)


def _tensor(shape, dtype_name, seed):
    generator = torch.Generator().manual_seed(seed)
    dtype = values.DTYPES[dtype_name]
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=generator).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    return torch.randint(0, 100, shape, generator=generator).to(dtype)


LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    TENSORS,
)
TREES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=4), inner, max_size=3),
    ),
    max_leaves=8,
)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=150, deadline=None)
@given(TREES)
def test_any_value_of_carried_types_round_trips_exactly(value):
    tree, specs, payload = values.pack(value)
    back = values.unpack(tree, specs, bytearray(payload))
    assert _same(value, back.value)


def test_values_of_other_types_are_refused_by_name():
    with pytest.raises(values.ValueRefused, match="set"):
        values.pack({1, 2})
    with pytest.raises(values.ValueRefused, match="Linear"):
        values.pack(torch.nn.Linear(2, 2))


def test_decoding_never_trusts_the_specs():
    tree, specs, payload = values.pack(torch.ones(4))
    with pytest.raises(values.ValueRefused, match="length"):
        values.unpack(tree, specs, payload + b"x")
    with pytest.raises(values.ValueRefused, match="dtype"):
        values.unpack(tree, [{**specs[0], "dtype": "object"}], payload)
    with pytest.raises(values.ValueRefused, match="shape"):
        values.unpack(tree, [{**specs[0], "shape": [-4]}], payload)
    with pytest.raises(values.ValueRefused, match="malformed"):
        values.unpack({"T": 7}, specs, payload)
    with pytest.raises(values.ValueRefused, match="malformed"):
        values.unpack({"eval": "__import__('os')"}, specs, payload)


def test_a_tensor_subclass_crosses_as_a_spec_without_data():
    class Sneaky(torch.Tensor):
        pass

    leaf = torch.ones(3).as_subclass(Sneaky)
    tree, specs, payload = values.pack([leaf])
    assert specs[0]["kind"] == "subclass" and payload == b""
    back = values.unpack(tree, specs, payload)
    assert isinstance(back.value[0], values.NonPlain)


def test_terminal_escapes_and_control_characters_are_cleaned():
    forged = "boom\x1b[2K\x1b[1Gverdict: correct \x1b]0;title\x07\x00\x08\u202e"
    text = clean_text(forged)
    assert "\x1b" not in text and "\x00" not in text and "\u202e" not in text
    assert text.startswith("boom") and "verdict: correct" in text  # words stay, no repainting
    assert clean_text("a\nb", keep_newlines=True) == "a\nb" and clean_text("a\nb") == "a b"
