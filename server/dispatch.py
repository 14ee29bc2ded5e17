"""From frames to pygls, answering as JSON-RPC 2.0 says where pygls would drop or fail.

pygls' loop parses a body with `object_hook=structure_message` (every nested object that
happens to hold a "jsonrpc" key is structured too), drops invalid JSON with a log line, and
fails on a batch or a non-object. Here the body is parsed once, checked as a JSON-RPC
envelope, and only a well-formed message reaches `protocol.handle_message`; everything else
is answered: invalid JSON with Parse error (-32700, id null), an invalid message object with
Invalid Request (-32600), and a batch (LSP has none) with one Invalid Request per request or
malformed element in it, or one for an empty batch.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from server.framing import Frame, FrameReader

PARSE_ERROR = -32700
INVALID_REQUEST = -32600

log = logging.getLogger("kernel_agent.server.dispatch")


def error_response(msg_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


def valid_id(value: Any) -> bool:
    """LSP ids are integers or strings (JSON-RPC's fractional numbers are refused)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def envelope_problem(message: Any) -> str | None:
    """Why `message` is not a JSON-RPC 2.0 request, notification or response (None if it is)."""
    if not isinstance(message, dict):
        return f"a message must be a JSON object, not {type(message).__name__}"
    if message.get("jsonrpc") != "2.0":
        return 'a message must have "jsonrpc": "2.0"'
    if "id" in message and not (valid_id(message["id"]) or message["id"] is None):
        return "an id must be a string or an integer"
    if "method" in message:
        if not isinstance(message["method"], str) or not message["method"]:
            return "a method must be a non-empty string"
        if "params" in message and not isinstance(message["params"], (dict, list)):
            return "params must be an object or an array"
        return None
    if "id" not in message:
        return "neither a request, a notification nor a response"
    if ("result" in message) == ("error" in message):
        return "a response must have exactly one of result and error"
    if "error" in message and not isinstance(message["error"], dict):
        return "a response's error must be an object"
    return None


def reply_id(message: Any) -> Any:
    """The id to answer an invalid message with: its own when usable, else null."""
    if isinstance(message, dict) and valid_id(message.get("id")):
        return message["id"]
    return None


class Dispatcher:
    """Hands each well-formed message to the protocol; answers the rest itself."""

    def __init__(
        self,
        protocol: Any,
        send: Callable[[Any], None],
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self.protocol = protocol
        self.send = send
        self.on_error = on_error

    def dispatch(self, frame: Frame) -> None:
        if frame.error is not None:
            log.info("frame refused: %s", frame.error)
            code = INVALID_REQUEST if frame.too_large else PARSE_ERROR
            self.send(error_response(None, code, f"frame refused: {frame.error}"))
            return
        self.body(frame.body or b"")

    def body(self, body: bytes) -> None:
        try:
            message = json.loads(body)
        except (ValueError, RecursionError) as error:
            detail = "nested too deeply" if isinstance(error, RecursionError) else str(error)
            self.send(error_response(None, PARSE_ERROR, f"Parse error: {detail[:200]}"))
            return
        if isinstance(message, list):
            self.batch(message)
        else:
            self.one(message)

    def batch(self, items: list[Any]) -> None:
        """LSP has no batches: each request or malformed element gets Invalid Request;
        notifications and responses in it get nothing, as JSON-RPC says."""
        if not items:
            self.send(error_response(None, INVALID_REQUEST, "Invalid Request: an empty batch"))
            return
        replies = [
            error_response(
                reply_id(item),
                INVALID_REQUEST,
                "Invalid Request: LSP does not support batches; send one message per frame",
            )
            for item in items
            if envelope_problem(item) is not None or ("method" in item and "id" in item)
        ]
        if replies:
            self.send(replies)

    def one(self, message: Any) -> None:
        problem = envelope_problem(message) or self._notification_with_id(message)
        if problem is not None:
            reply = error_response(
                reply_id(message), INVALID_REQUEST, f"Invalid Request: {problem}"
            )
            self.send(reply)
            return
        method = message.get("method")
        try:
            if method and "params" not in message and not self.protocol.get_message_type(method):
                message = {**message, "params": None}  # pygls' untyped messages need the key
            structured = self.protocol.structure_message(message)
            self.protocol.handle_message(structured)
        except (SystemExit, KeyboardInterrupt, BrokenPipeError):
            raise
        except Exception as error:  # pygls answered requests itself; this is what it raised
            log.info("message not handled: %s", error)
            if self.on_error is not None:
                self.on_error(error)

    def _notification_with_id(self, message: dict[str, Any]) -> str | None:
        """A method LSP defines as a notification, sent with an id: pygls would run it as a
        notification and leave the request unanswered."""
        method = message.get("method")
        if "id" not in message or not method:
            return None
        kind = self.protocol.get_message_type(method)
        if kind is not None and kind.__name__.endswith("Notification"):
            return f"{method} is a notification: it takes no id"
        return None


async def serve_frames(
    reader: FrameReader, dispatcher: Dispatcher, stop_event: threading.Event
) -> None:
    """The main loop: frames until the input ends or the server stops. It yields to the
    handlers after each frame: a flood of buffered frames must not starve them (nor pile up
    thousands of pending tasks)."""
    while not stop_event.is_set():
        frame = await reader.next_frame()
        if frame is None:
            return
        dispatcher.dispatch(frame)
        await asyncio.sleep(0)
