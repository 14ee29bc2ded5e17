"""The `kernel-agent` command line: the only place in agents/ that parses arguments.

Each subcommand's module here turns its arguments into a typed request (agents/request/)
and hands it to the function that answers it; nothing below this package sees argparse.

Exit status: 0 when the candidate is correct, 1 for any other verdict, 2 for a usage error
(always one line on stderr, never a traceback). Every error line has one prefix, argparse's
own: `kernel-agent COMMAND: error: ...` (`kernel-agent: error: ...` before a command is
known), whoever found the error: the parser, this module, or a subcommand (`print_error`).

Start-up: only the standard library is imported here. A subcommand's module (and torch, numpy,
rich behind it) is imported only when that subcommand runs or prints its own help, so
`kernel-agent --help` and a mistyped command answer at once.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agents import __version__

EXIT_CORRECT, EXIT_NOT_CORRECT, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A bad command line; reported in one line with exit status 2. `prog`: the parser that
    found it, whose --help the line points to."""

    def __init__(self, message: str, prog: str = "kernel-agent") -> None:
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise UsageError(message, self.prog)


def print_error(command: str | None, message: object) -> None:
    """The one way an error reaches the user: one line on stderr, prefixed as argparse's own
    (`kernel-agent optimize: error: ...`), so every subcommand's errors read alike."""
    where = f"kernel-agent {command}" if command else "kernel-agent"
    text = " ".join(str(message).split())  # one line, whatever the message held
    print(f"{where}: error: {text}", file=sys.stderr)


@dataclass(frozen=True)
class Command:
    """A subcommand: its line in `kernel-agent --help`, and where its parser and runner live
    (imported only when the subcommand is used)."""

    name: str
    summary: str
    module: str
    add: str
    run: str

    def load(self, attribute: str) -> Callable[..., Any]:
        return getattr(importlib.import_module(self.module), attribute)


COMMANDS = (
    Command(
        "eval",
        "verify a candidate (ModelNew) against a KernelBench problem (Model) and time it",
        "agents.cli.evaluate",
        "add_eval_parser",
        "run_eval",
    ),
    Command(
        "optimize",
        "search for a faster, verified ModelNew for a KernelBench-format file",
        "agents.cli.optimize",
        "add_optimize_parser",
        "run_optimize",
    ),
    Command(
        "bench",
        "time eager and a baseline (torch.compile, or eager itself) over a suite",
        "agents.cli.bench",
        "add_bench_parser",
        "run_bench_command",
    ),
    Command(
        "profile",
        "show where a KernelBench problem's forward spends its time, line by line",
        "agents.cli.profile",
        "add_profile_parser",
        "run_profile",
    ),
    Command(
        "skills",
        "the expert skill library: list, show, and match against a kernel",
        "agents.cli.skills",
        "add_skills_parser",
        "run_skills",
    ),
    Command(
        "memory",
        "the optimization memory: list, show, export, import, forget, stats",
        "agents.cli.memory",
        "add_memory_parser",
        "run_memory",
    ),
    Command(
        "serve",
        "run the language server (LSP over stdio, or TCP with --tcp HOST:PORT)",
        "agents.cli.serve",
        "add_serve_parser",
        "run_serve",
    ),
)
_BY_NAME = {command.name: command for command in COMMANDS}

_USAGE_ERRORS = (
    ("agents.evaluate", "EvalError"),
    ("agents.task", "TaskLoadError"),
    ("agents.profile.api", "ProfileError"),
    ("agents.request.settings", "RequestError"),
    ("agents.cli.skills", "SkillCommandError"),
    ("agents.cli.memory", "MemoryCommandError"),
)
"""Exceptions that mean a bad request (one line, exit status 2), by module: a class can only
be raised once its module is loaded, so none of these modules is imported to check."""


def build_parser(only: str | None = None, *, lazy: bool = False) -> argparse.ArgumentParser:
    """The whole command line. `lazy`: only the subcommand `only` (if any) is built in full,
    the others are listed by name and summary alone and nothing of theirs is imported."""
    parser = _Parser(prog="kernel-agent", description="Verified kernel optimisation.")
    parser.add_argument("--version", action="version", version=f"kernel-agent {__version__}")
    commands = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    for command in COMMANDS:
        if not lazy or command.name == only:
            command.load(command.add)(commands)
        else:
            commands.add_parser(command.name, help=command.summary, add_help=False)
    return parser


def _command_word(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option:
    the top level's options take no value), if it is one we know."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in _BY_NAME else None
    return None


def _is_usage_error(error: BaseException) -> bool:
    if isinstance(error, UsageError):
        return True
    for module_name, class_name in _USAGE_ERRORS:
        module = sys.modules.get(module_name)
        if module is not None and isinstance(error, getattr(module, class_name)):
            return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    words = list(argv if argv is not None else sys.argv[1:])
    word = _command_word(words)
    try:
        parser = build_parser(word, lazy=True)
        args = parser.parse_args(words)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        command = _BY_NAME[args.command]
        if command.name == "bench":
            return command.load(command.run)(args, words)
        return command.load(command.run)(args)
    except KeyboardInterrupt:
        print("kernel-agent: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if not _is_usage_error(error):
            raise
        print_error(word, _with_help(error, word))
        return EXIT_USAGE


def _with_help(error: Exception, command: str | None) -> str:
    """A parser's message points to the --help that explains it: the subcommand's, also when
    the top-level parser found the flag it did not know (`bench --bogus`)."""
    if not isinstance(error, UsageError):
        return str(error)
    prog = error.prog
    if prog == "kernel-agent" and command is not None:
        prog = f"kernel-agent {command}"
    return f"{error} (see `{prog} --help`)"
