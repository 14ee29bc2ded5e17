"""Malformed frames written as raw bytes to `python -m server`: each gets the JSON-RPC 2.0
answer, and the server goes on serving the frames after it (issue 19)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.lsp_fuzz import RawServer, frame

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "bench/problems/13_gemm_divide_sum_scaling.py"
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND = -32700, -32600, -32601
BAD_HOVER = {"textDocument": 3, "position": "here"}


@pytest.fixture
def server() -> Iterator[RawServer]:
    raw = RawServer()
    raw.initialize(ROOT)
    yield raw
    raw.close()


def null_id_errors(server: RawServer, count: int) -> list[dict]:
    """The next `count` replies with id null (or batches), in the order they came."""
    found = server.wait_for(lambda: len(server.unmatched) >= count and server.unmatched[:count])
    del server.unmatched[:count]
    return found


def still_serving(server: RawServer) -> None:
    reply = server.request("textDocument/codeLens", {"textDocument": {"uri": "file:///no.py"}})
    assert reply["result"] is None and server.alive()


@pytest.mark.parametrize(
    "length", [b"99999999999999999999", b"1000000000000000", b"67108865", b"9" * 5000]
)
def test_absurd_content_length_is_refused_and_the_next_frame_served(server, length):
    server.write(b"Content-Length: " + length + b"\r\n\r\n{}")
    (error,) = null_id_errors(server, 1)
    assert error["id"] is None and error["error"]["code"] in (INVALID_REQUEST, PARSE_ERROR)
    assert error["error"]["message"].startswith("frame refused")
    if len(length) < 100:
        assert error["error"]["code"] == INVALID_REQUEST and "67108864" in error["error"]["message"]
    still_serving(server)


@pytest.mark.parametrize(
    ("args", "env"),
    [(("--max-message-bytes", "1K"), {}), ((), {"KERNEL_AGENT_MAX_MESSAGE_BYTES": "1024"})],
)
def test_the_cap_is_a_command_line_option_and_an_environment_variable(args, env):
    server = RawServer(args, env={**os.environ, **env})
    try:
        server.initialize(ROOT)
        big = {"jsonrpc": "2.0", "id": "big", "method": "custom/x", "params": ["y" * 2000]}
        server.write(frame(big))
        (error,) = null_id_errors(server, 1)
        assert error["error"]["code"] == INVALID_REQUEST
        assert "limit of 1024 bytes" in error["error"]["message"]
        still_serving(server)
    finally:
        server.close()


def test_a_bad_cap_option_is_a_usage_error():
    server = RawServer(("--max-message-bytes", "lots"))
    try:
        assert server.proc.wait(timeout=60) == 2
        assert "--max-message-bytes" in server.stderr_tail()
    finally:
        server.close()


@pytest.mark.parametrize("body", [b"{", b'{"jsonrpc": "2.0", "id": 1,', b"\xff\xfe\x00", b""])
def test_invalid_json_is_a_parse_error_with_id_null(server, body):
    server.write(frame(raw=body))
    (error,) = null_id_errors(server, 1)
    assert error == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": PARSE_ERROR, "message": error["error"]["message"]},
    }
    assert error["error"]["message"].startswith("Parse error")
    still_serving(server)


def test_deeply_nested_json_is_a_parse_error(server):
    server.write(frame(raw=b"[" * 200_000 + b"]" * 200_000))
    (error,) = null_id_errors(server, 1)
    assert error["error"]["code"] == PARSE_ERROR
    still_serving(server)


def test_batches_are_answered_as_json_rpc_says(server):
    server.write(frame([]))  # an empty array: one error, not an array
    (empty,) = null_id_errors(server, 1)
    assert isinstance(empty, dict) and empty["error"]["code"] == INVALID_REQUEST
    server.write(frame([1, 2]))  # non-requests: an array of errors, one each
    (pair,) = null_id_errors(server, 1)
    assert [e["error"]["code"] for e in pair] == [INVALID_REQUEST] * 2
    assert [e["id"] for e in pair] == [None, None]
    request = {"jsonrpc": "2.0", "id": 7, "method": "textDocument/hover", "params": {}}
    notification = {"jsonrpc": "2.0", "method": "initialized", "params": {}}
    server.write(frame([request, notification]))  # a notification gets no reply
    (mixed,) = null_id_errors(server, 1)
    assert [(e["id"], e["error"]["code"]) for e in mixed] == [(7, INVALID_REQUEST)]
    assert "batches" in mixed[0]["error"]["message"]
    still_serving(server)


@pytest.mark.parametrize(
    "header",
    [
        b"Content-Type: application/vscode-jsonrpc\r\n\r\n{}",  # no Content-Length
        b"Content-Length: twelve\r\n\r\n{}",
        b"Content-Length: -5\r\n\r\n{}",
        b"Content-Length: 0x10\r\n\r\n{}",
        b"x" * 10_000,  # a header line that never ends
        b"\x00\x01\x02 garbage\r\n\r\n",
        b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    ],
)
def test_header_garbage_is_reported_and_skipped(server, header):
    server.write(header)
    still_serving(server)  # the next frame's Content-Length puts the reader back in step
    (error,) = null_id_errors(server, 1)
    assert error["id"] is None and error["error"]["code"] == PARSE_ERROR
    assert error["error"]["message"].startswith("frame refused")


@pytest.mark.parametrize(
    ("message", "code", "reply_id"),
    [
        ({"jsonrpc": "1.0", "id": 3, "method": "x"}, INVALID_REQUEST, 3),
        ({"jsonrpc": "2.0", "id": {"a": 1}, "method": "x"}, INVALID_REQUEST, None),
        ({"jsonrpc": "2.0", "id": 4, "method": 12}, INVALID_REQUEST, 4),
        ({"jsonrpc": "2.0", "id": 5, "method": "x", "params": 3}, INVALID_REQUEST, 5),
        ({"jsonrpc": "2.0", "id": 6}, INVALID_REQUEST, 6),
        ({"jsonrpc": "2.0", "id": 8, "method": "custom/unknown"}, METHOD_NOT_FOUND, 8),
        (
            {"jsonrpc": "2.0", "id": 9, "method": "textDocument/didClose", "params": {}},
            INVALID_REQUEST,
            9,
        ),
        (
            {"jsonrpc": "2.0", "id": 10, "method": "textDocument/hover", "params": BAD_HOVER},
            -32602,
            10,
        ),
    ],
)
def test_invalid_messages_get_an_error_reply(server, message, code, reply_id):
    server.write(frame(message))
    if reply_id is None:
        (reply,) = null_id_errors(server, 1)
    else:
        reply = server.reply(reply_id)
    assert reply["error"]["code"] == code
    still_serving(server)


def test_failed_commands_leave_no_memory_behind(server):
    """pygls kept every command's future (its error and traceback with it): about 7.7 MB
    per 1,000 failed kernelAgent.optimize. After a warm-up, 3,000 more must not grow the
    server by a third of that."""
    uri = (ROOT / "never-opened.py").as_uri()

    def fail(count: int, tag: str) -> None:
        for start in range(0, count, 250):
            ids = [f"{tag}-{n}" for n in range(start, start + 250)]
            for n, msg_id in enumerate(ids):
                arguments = [42] if n % 2 else [{"uri": uri, "target": "Model"}]
                server.write(
                    frame(
                        {
                            "jsonrpc": "2.0",
                            "id": msg_id,
                            "method": "workspace/executeCommand",
                            "params": {"command": "kernelAgent.optimize", "arguments": arguments},
                        }
                    )
                )
            for msg_id in ids:
                assert "error" in server.reply(msg_id)

    fail(1000, "warm")
    before = server.rss_kb()
    fail(3000, "measured")
    grown_mb = (server.rss_kb() - before) / 1024
    assert grown_mb < 7.5, f"RSS grew {grown_mb:.1f} MB over 3,000 failed commands"
    still_serving(server)
