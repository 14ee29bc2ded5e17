"""The language server app: every feature registered on one server instance, and how it is
served (stdio or TCP).

The instance and its shared state live in `server.language_server`; the handlers live in
`server/features/`, one module per part of the protocol, each with a `register(ls)` that
receives the instance. Features never import this module nor each other, so the app is the
only place that knows them all. Errors a user can act on become one window/showMessage line;
details and stack traces go to window/logMessage only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from threading import Event

from pygls.exceptions import JsonRpcException
from pygls.io_ import StdoutWriter

from server.dispatch import Dispatcher, serve_frames
from server.features import (
    code_actions,
    document_sync,
    job_control,
    lens_and_hover,
    lifecycle,
    pull_diagnostics,
    rewrites,
)
from server.framing import FrameReader, Read
from server.language_server import KernelAgentServer

__all__ = ["configure_logging", "create_server", "serve_stdio", "serve_tcp"]

# Registration order is the order of the server's capabilities (its command list included).
FEATURES = (
    lifecycle,
    document_sync,
    pull_diagnostics,
    code_actions,
    lens_and_hover,
    job_control,
    rewrites,
)


def create_server() -> KernelAgentServer:
    """A server with every feature's handlers registered."""
    ls = KernelAgentServer()
    for feature in FEATURES:
        feature.register(ls)
    return ls


async def _serve(ls: KernelAgentServer, read: Read) -> None:
    """Frames from `read` until the input ends (`server.framing`, `server.dispatch`)."""
    dispatcher = Dispatcher(
        ls.protocol,
        ls.protocol.send_payload,
        lambda error: ls.report_server_error(error, JsonRpcException),
    )
    assert ls._stop_event is not None
    await serve_frames(FrameReader(read, ls.max_message_bytes), dispatcher, ls._stop_event)


def serve_stdio(ls: KernelAgentServer) -> None:
    """Serve over stdin/stdout; when the client goes away, end every worker first."""
    ls._stop_event = Event()
    stdin = sys.stdin.buffer
    ls.protocol.set_writer(StdoutWriter(sys.stdout.buffer))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        try:
            await _serve(ls, lambda n: loop.run_in_executor(ls.thread_pool, stdin.read1, n))
        finally:
            await ls.jobs.shutdown()

    try:
        asyncio.run(main())
    except (BrokenPipeError, KeyboardInterrupt, SystemExit):
        pass
    finally:
        ls.shutdown()


def serve_tcp(ls: KernelAgentServer, host: str, port: int) -> None:
    """Serve one client on HOST:PORT; when it disconnects or exits, end every worker and
    stop (pygls' own TCP loop lets `exit` escape as an unhandled SystemExit)."""
    ls._stop_event = Event()

    async def main() -> None:
        finished = asyncio.Event()

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            ls.protocol.set_writer(writer)  # type: ignore[arg-type]
            try:
                await _serve(ls, reader.read)
            except SystemExit:
                pass
            finally:
                await ls.jobs.shutdown()
                finished.set()

        server = await asyncio.start_server(connection, host, port)
        async with server:
            await finished.wait()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    finally:
        ls.shutdown()


def configure_logging(verbose: bool) -> None:
    """stderr only: stdout belongs to the protocol."""
    level = logging.DEBUG if verbose else logging.WARNING
    logging.basicConfig(level=level, format="kernel-agent: %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
