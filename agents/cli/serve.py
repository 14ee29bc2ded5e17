"""`kernel-agent serve`: the language server, started as `python -m server` with the flags
passed through (agents/ never imports server/: the server is a process of its own).

The flags are defined here and also read by server/serve.py, so `kernel-agent serve --help`
and `python -m server --help` cannot drift apart; the server itself checks their values.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
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


def add_serve_parser(commands: Any) -> argparse.ArgumentParser:
    serve = commands.add_parser(
        "serve",
        help="run the language server (LSP over stdio, or TCP with --tcp HOST:PORT)",
        description="Run the Kernel Agent language server. Editors start it over stdio; "
        "--tcp serves one client on HOST:PORT (handy for debugging).",
    )
    add_serve_arguments(serve)
    return serve


def server_argv(args: argparse.Namespace) -> list[str]:
    """The flags of `python -m server` that `args` stands for."""
    argv = ["--stdio"] if args.stdio else []
    if args.tcp is not None:
        argv += ["--tcp", args.tcp]
    if args.verbose:
        argv.append("--verbose")
    if args.max_message_bytes is not None:
        argv += ["--max-message-bytes", args.max_message_bytes]
    return argv


def run_serve(args: argparse.Namespace) -> int:
    """Become the server process (stdin, stdout and the exit status are its own)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "server", *server_argv(args)])
    return 0  # not reached: execv replaces this process
