"""The command line's shape: every option explained, and nothing heavy imported to build it.

Why: `kernel-agent --help` took 2.8 s while the parser imported every subcommand's module,
and options such as --device, --max-evals and --beam printed no help at all. Start-up is
pinned by what gets imported (torch must not be), not by a timing that depends on the
machine; `bench/startup.py` measures the time itself.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

KERNEL_AGENT = [sys.executable, "-m", "agents"]
HEAVY = ("torch", "numpy", "rich", "pygls", "ray", "matplotlib")


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """Every (sub)command's parser, by its full name ("kernel-agent memory list")."""
    from agents.cli import build_parser

    found = []
    pending = [build_parser()]
    while pending:
        parser = pending.pop()
        found.append((parser.prog, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(dict.fromkeys(action.choices.values()))
    return sorted(found, key=lambda item: item[0])


def _unexplained(parser: argparse.ArgumentParser) -> list[str]:
    return [
        "/".join(action.option_strings) or action.dest
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction)
        and (action.help is None or not action.help.strip())
    ]


def _cases() -> list:
    return [pytest.param(parser, id=name) for name, parser in _parsers()]


@pytest.mark.parametrize("parser", _cases())
def test_every_option_and_argument_has_a_help_line(parser):
    assert _unexplained(parser) == [], f"{parser.prog}: options without help"


def test_every_subcommand_is_listed_with_its_own_summary():
    """The top level lists subcommands without importing them (agents.cli.COMMANDS); each
    summary there must be the one its own parser gives, so the two cannot drift apart."""
    from agents.cli import COMMANDS, build_parser

    parser = build_parser()
    (subcommands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    given = {choice.dest: choice.help for choice in subcommands._choices_actions}
    assert given == {command.name: command.summary for command in COMMANDS}


def _imported_after(code: str) -> dict[str, bool]:
    probe = (
        f"import sys, json\n{code}\n"
        f"print(json.dumps({{name: name in sys.modules for name in {list(HEAVY)!r}}}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_importing_the_cli_imports_nothing_heavy():
    assert _imported_after("import agents.cli") == dict.fromkeys(HEAVY, False)


def test_building_every_parser_does_not_import_torch():
    imported = _imported_after("import agents.cli\nagents.cli.build_parser()")
    assert imported["torch"] is False


def test_top_level_help_and_a_bad_command_answer_without_loading_subcommands():
    for args in (["--help"], ["--version"], ["frobnicate"]):
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys, runpy\n"
                "try:\n"
                "    runpy.run_module('agents', run_name='__main__')\n"
                "except SystemExit:\n"
                "    pass\n"
                f"print(sorted(n for n in {list(HEAVY)!r} if n in sys.modules))",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert done.stdout.strip().splitlines()[-1] == "[]", (args, done.stdout, done.stderr)


def test_each_subcommand_help_works_and_exits_zero():
    from agents.cli import COMMANDS

    for command in COMMANDS:
        done = subprocess.run(
            [*KERNEL_AGENT, command.name, "--help"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert done.returncode == 0, (command.name, done.stderr)
        assert done.stdout.startswith(f"usage: kernel-agent {command.name}"), done.stdout


def test_unknown_command_is_one_line_naming_the_choices():
    done = subprocess.run(
        [*KERNEL_AGENT, "frobnicate"], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "'frobnicate'" in done.stderr and "optimize" in done.stderr
