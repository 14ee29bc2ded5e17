"""What a handler does with bad input or an unexpected error: answer with a JSON-RPC error
(one line the client can show), and keep the details for the log."""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

if TYPE_CHECKING:
    from server.language_server import KernelAgentServer


def object_argument(args: tuple, *required: str) -> dict[str, Any]:
    """The command's single object argument, checked (InvalidParams otherwise)."""
    if len(args) != 1 or not isinstance(args[0], dict):
        raise JsonRpcInvalidParams(
            message=f"expected one object argument with {', '.join(required)}"
        )
    value = args[0]
    for name in required:
        if not isinstance(value.get(name), str) or not value[name]:
            raise JsonRpcInvalidParams(message=f"argument {name!r} must be a non-empty string")
    return value


def guarded(ls: KernelAgentServer, what: str):
    """Unexpected errors in a handler: one line to the client, the trace to the log."""

    def fail(error: Exception) -> JsonRpcException:
        ls.log_line(
            f"{what} failed: " + "".join(traceback.format_exception(error)),
            types.MessageType.Error,
        )
        return JsonRpcException(
            message=f"Kernel Agent: {what} failed: {type(error).__name__}: {error}"
        )

    def decorate(fn: Callable):
        if inspect.iscoroutinefunction(fn):

            @wraps(fn)
            async def wrapper(*args, **kwargs):
                try:
                    return await fn(*args, **kwargs)
                except JsonRpcException:
                    raise
                except Exception as error:
                    raise fail(error) from None

            return wrapper

        @wraps(fn)
        def sync_wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except JsonRpcException:
                raise
            except Exception as error:
                raise fail(error) from None

        return sync_wrapper

    return decorate
