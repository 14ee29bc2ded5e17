"""`python -m server` (which `kernel-agent serve` becomes): the language server over stdio
or TCP. Its flags are the CLI's (agents/cli/serve.py), so both commands show the same help;
stdout is the protocol's, so nothing here prints to it while serving.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from agents.cli.serve import add_serve_arguments


class ServeUsageError(Exception):
    """A bad --tcp address; one line."""


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
    add_serve_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_serve(args)
    except ServeUsageError as error:
        print(f"python -m server: error: {error}", file=sys.stderr)
        return 2
