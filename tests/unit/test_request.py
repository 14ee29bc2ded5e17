"""One typed request, one name per setting (issue 33).

Why: a setting used to have four or five names (`kernelAgent.search.iterations` →
`Settings.iterations` → `iters` → `--iters` → `SearchConfig.iterations`) and the defaults
lived in three commands. These tests hold the settings table (agents/request/table.py)
against the dataclasses, the command line's parser and the extension's package.json, and
check that a request crosses a process boundary as JSON unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from pathlib import Path

import pytest

from agents.cli import build_parser
from agents.cli.optimize import optimize_request
from agents.llm.base import ROLES
from agents.llm.config import LLMConfig, RoleModels
from agents.request import defaults
from agents.request.requests import OptimizeRequest
from agents.request.settings import (
    BudgetSettings,
    LLMSettings,
    RequestError,
    RoleSettings,
    SearchSettings,
)
from agents.request.table import BY_EDITOR, BY_PATH, SETTINGS, config_values, with_values
from agents.request.target import Target
from agents.targets.load import load_target
from agents.task import SourceFile
from tests.conftest import ROOT

PROBLEM = ROOT / "tests" / "problems" / "linear_relu.py"
PACKAGE = ROOT / "editor-extension" / "package.json"
CLIENT_SIDE = ("interpreter", "trace.server", "rewriteMode", "profileOnSave", "maxJobs")
"""Settings the editor or the server keeps for itself: none reaches a request."""


def _optimize_parser() -> argparse.ArgumentParser:
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return commands.choices["optimize"]


def _leaf_paths(cls: type, prefix: str = "") -> list[str]:
    """Every settable field path of a settings dataclass (roles expanded per role)."""
    paths = []
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        path = f"{prefix}{field.name}"
        if field.name == "target" or path == "llm.prices":
            continue  # the problem itself, and the price table (a TOML table, kept whole)
        if path == "llm.roles":
            for role in ROLES:
                paths += _leaf_paths(RoleSettings, f"llm.roles.{role}.")
        elif dataclasses.is_dataclass(hints[field.name]):
            paths += _leaf_paths(hints[field.name], path + ".")
        else:
            paths.append(path)
    return paths


def test_every_request_field_is_in_the_table_and_every_row_is_a_field():
    fields = _leaf_paths(OptimizeRequest)
    assert sorted(fields) == sorted(setting.path for setting in SETTINGS)


def test_every_editor_setting_of_the_extension_maps_to_a_request_field():
    data = json.loads(PACKAGE.read_text())
    sections = data["contributes"]["configuration"]
    sections = sections if isinstance(sections, list) else [sections]
    keys = [key for section in sections for key in section["properties"]]
    assert keys, "package.json declares no settings"
    unmapped = []
    for key in keys:
        name = key.removeprefix("kernelAgent.")
        if name in CLIENT_SIDE:
            continue
        if name not in BY_EDITOR:
            unmapped.append(key)
    assert unmapped == []
    declared = {key.removeprefix("kernelAgent.") for key in keys}
    assert set(BY_EDITOR) <= declared, "the table names an editor setting the extension lacks"


def test_every_flag_in_the_table_is_the_parsers_with_the_field_path_as_its_dest():
    parser = _optimize_parser()
    by_flag = {flag: action for action in parser._actions for flag in action.option_strings}
    for setting in SETTINGS:
        if setting.flag is None:
            continue
        assert setting.flag in by_flag, f"{setting.flag} is not a flag of optimize"
        assert by_flag[setting.flag].dest == setting.path, setting.flag
    dotted = {action.dest for action in parser._actions if "." in action.dest}
    assert dotted <= set(BY_PATH), "a flag sets a field the table does not list"


def test_names_agree_modulo_case_and_group():
    """`search.max_evals` may be `--max-evals` and `search.maxEvals`, never another word."""
    for setting in SETTINGS:
        last = setting.path.rsplit(".", 1)[-1]
        if setting.flag is not None and setting.flag != "--no-memory":
            assert setting.flag == "--" + (
                "memory" if setting.path == "memory.path" else last.replace("_", "-")
            ), setting
        if setting.editor is not None:
            head, *rest = last.split("_")
            camel = head + "".join(part.title() for part in rest)
            editor_last = setting.editor.rsplit(".", 1)[-1]
            assert editor_last == ("enabled" if setting.path == "memory.enabled" else camel), (
                setting
            )


def test_old_flag_names_still_parse_to_the_new_fields():
    parser = build_parser()
    old = parser.parse_args(["optimize", "f.py", "--iters", "3", "--llm", "openai"])
    new = parser.parse_args(["optimize", "f.py", "--iterations", "3", "--backend", "openai"])
    assert vars(old) == vars(new)
    assert getattr(new, "search.iterations") == 3 and getattr(new, "llm.backend") == "openai"


def test_a_request_round_trips_through_json():
    request = with_values(
        OptimizeRequest(load_target(PROBLEM)),
        {
            "search.iterations": 3,
            "search.profile": False,
            "budget.max_cost": 1.5,
            "evaluation.device": "cuda",
            "evaluation.jail": False,
            "llm.backend": "openai",
            "llm.base_url": "http://localhost:8000/v1",
            "llm.roles.summarizer.model": "small",
            "llm.prices": {"small": {"input": 1, "output": 2}},
            "memory.path": "/tmp/m.sqlite3",
            "seed": 7,
        },
    )
    again = OptimizeRequest.from_json(json.loads(json.dumps(request.to_json())))
    assert again == request
    assert again.memory.path == Path("/tmp/m.sqlite3") and again.budget.max_cost == 1.5


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"search": {"beam": "six"}}, "search.beam must be a whole number"),
        ({"search": {"beams": 6}}, "unknown setting search.beams"),
        ({"evaluation": {"jail": "yes"}}, "evaluation.jail must be true or false"),
        ({"evaluation": {"device": "tpu"}}, "unknown device 'tpu'"),
        ({"llm": {"roles": {"critic": {}}}}, "llm.critic is not a role"),
        ({"llm": {"base_url": "localhost"}}, "llm.base_url must start with http://"),
    ],
)
def test_a_bad_request_is_one_line_naming_the_setting(data, words):
    base = OptimizeRequest(Target(SourceFile("x = 1", "p.py"), "p")).to_json()
    for group, values in data.items():
        base[group] = {**base[group], **values}
    with pytest.raises(RequestError) as caught:
        OptimizeRequest.from_json(base)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_defaults_live_in_one_place():
    target = Target(SourceFile("x = 1", "p.py"), "p")
    offline = OptimizeRequest(target).resolved()
    assert dataclasses.asdict(offline.search) == {**defaults.OFFLINE_SEARCH, "profile": True}
    llm = OptimizeRequest(target, llm=LLMSettings(backend="anthropic")).resolved()
    assert dataclasses.asdict(llm.search) == {**defaults.LLM_SEARCH, "profile": True}
    given = OptimizeRequest(target, search=SearchSettings(beam=1)).resolved()
    assert given.search.beam == 1 and given.search.plans == defaults.OFFLINE_SEARCH["plans"]
    assert offline.evaluation.timing_budget == defaults.SEARCH_TIMING_BUDGET_S
    assert offline.budget == BudgetSettings(max_evals=defaults.MAX_EVALS)


def test_a_config_file_sets_any_setting_and_flags_given_win(tmp_path):
    config = tmp_path / "kernel-agent.toml"
    config.write_text(
        '[llm]\nbackend = "anthropic"\ntimeout_s = 1.5\n[llm.summarizer]\nmodel = "small"\n'
        "[search]\niterations = 8\nbeam = 2\n[evaluation]\njail = false\n"
    )
    args = build_parser().parse_args(
        ["optimize", str(PROBLEM), "--config", str(config), "--beam", "4"]
    )
    request = optimize_request(args)
    assert request.search.iterations == 8 and request.search.beam == 4
    assert request.evaluation.jail is False and request.llm.timeout_s == 1.5
    assert request.llm.backend == "anthropic" and request.llm.roles["summarizer"].model == "small"
    assert request.target.name == "linear_relu" and request.target.kind == "module"


def test_a_config_key_that_is_no_setting_names_the_file():
    with pytest.raises(RequestError, match=r"f\.toml: search\.beems is not a setting"):
        config_values({"search": {"beems": 1}}, "f.toml")


@pytest.mark.parametrize(
    ("table", "flags"),
    [
        ({}, {"backend": "openai", "base_url": "http://h/v1"}),
        ({"model": "m1", "executor": {"backend": "openai"}}, {"backend": "openai"}),
        ({"backend": "anthropic", "model": "m1"}, {"model": "m2"}),
        ({"backend": "anthropic", "planner": {"model": "p"}}, {"backend": "anthropic"}),
        ({"backend": "openai", "summarizer": {"backend": "anthropic"}}, {"backend": "openai"}),
    ],
)
def test_flags_over_a_config_file_resolve_as_they_did(table, flags):
    """--backend, --model and --base-url over a config file's [llm] give every role the
    model it got when they were applied to the resolved configs (RoleModels.with_changes)."""
    defaults_ = {k: v for k, v in table.items() if not isinstance(v, dict)}
    roles = {k: v for k, v in table.items() if isinstance(v, dict)}
    backend = flags.get("backend") or "offline"
    old = RoleModels.build(LLMConfig(backend=backend).overridden(defaults_), roles)
    old = old.with_changes(**flags)
    settings = LLMSettings(
        **defaults_, roles={role: RoleSettings(**values) for role, values in roles.items()}
    )
    new = settings.for_every_role(**flags).models().models
    for role in ROLES:
        assert new.for_role(role) == old.for_role(role), role
