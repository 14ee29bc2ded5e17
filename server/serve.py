"""`kernel-agent serve` and `python -m server`: the language server over stdio or TCP.

Argument parsing lives here, apart from the server, so that `kernel-agent --help` does not
import pygls; stdout is the protocol's, so nothing here prints to it while serving.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


class ServeUsageError(Exception):
    """A bad --tcp address; one line."""


def add_serve_parser(commands) -> argparse.ArgumentParser:
    serve = commands.add_parser(
        "serve",
        help="run the language server (LSP over stdio, or TCP with --tcp HOST:PORT)",
        description="Run the Kernel Agent language server. Editors start it over stdio; "
        "--tcp serves one client on HOST:PORT (handy for debugging).",
    )
    _add_arguments(serve)
    return serve


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stdio", action="store_true", help="serve over stdin/stdout (default)")
    parser.add_argument("--tcp", metavar="HOST:PORT", default=None, help="serve over TCP")
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logs on stderr")
    parser.add_argument(
        "--max-message-bytes",
        metavar="SIZE",
        default=None,
        help="refuse LSP messages larger than SIZE bytes (K/M/G suffixes; default 64M, "
        "or $KERNEL_AGENT_MAX_MESSAGE_BYTES)",
    )


def parse_address(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ServeUsageError(f"--tcp wants HOST:PORT, e.g. 127.0.0.1:2087 (got {value!r})")
    return host.strip("[]"), int(port)


def _max_message_bytes(value: str | None) -> int | None:
    """--max-message-bytes as bytes (None: the environment's or the default cap)."""
    if value is None:
        return None
    from server.framing import parse_max_body  # not at import: `kernel-agent --help` stays lean

    try:
        return parse_max_body(value)
    except ValueError as error:
        raise ServeUsageError(f"--max-message-bytes: {error}") from None


def run_serve(args: argparse.Namespace) -> int:
    if args.tcp and args.stdio:
        raise ServeUsageError("choose --stdio or --tcp, not both")
    address = parse_address(args.tcp) if args.tcp else None
    max_bytes = _max_message_bytes(getattr(args, "max_message_bytes", None))
    from server.app import configure_logging, create_server, serve_stdio, serve_tcp

    configure_logging(args.verbose)
    server = create_server()
    if max_bytes is not None:
        server.max_message_bytes = max_bytes
    if address is None:
        serve_stdio(server)
    else:
        print(f"kernel-agent: serving LSP on {address[0]}:{address[1]}", file=sys.stderr)
        serve_tcp(server, *address)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m server", description="Kernel Agent language server."
    )
    _add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_serve(args)
    except ServeUsageError as error:
        print(f"python -m server: error: {error}", file=sys.stderr)
        return 2
