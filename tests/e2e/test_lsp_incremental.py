"""Incremental analysis over LSP: random edits sent as didChange must leave the server with
the same code lenses and diagnostics as the final text opened fresh (issue 19).

The server re-reads only the statements an edit touched (agents/targets/analysis.py); this checks
it against a from-scratch read of the same text, through `python -m server` over stdio."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings

from bench.lsp_fuzz import RawServer, code_lenses, open_document
from bench.lsp_latency import generate_document
from tests.edit_scripts import BROKEN_CLASS, SEEDS, edit_scripts, position

ROOT = Path(__file__).resolve().parents[2]

URIS = itertools.count()


@pytest.fixture(scope="module")
def server() -> Iterator[RawServer]:
    raw = RawServer()
    raw.initialize(ROOT)
    yield raw
    raw.close()


def span(line: int, character: int, end_line: int, end_character: int) -> dict[str, Any]:
    return {
        "start": {"line": line, "character": character},
        "end": {"line": end_line, "character": end_character},
    }


def normalized(lenses: list[dict], uri: str) -> str:
    return json.dumps(lenses, sort_keys=True).replace(json.dumps(uri)[1:-1], "URI")


def diagnostics(server: RawServer, uri: str, version: int) -> list[dict[str, Any]]:
    published = server.wait_for(
        lambda: (found := server.diagnostics.get(uri)) and found.get("version") == version and found
    )
    return sorted(published["diagnostics"], key=lambda d: json.dumps(d, sort_keys=True))


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=edit_scripts())
@example(script=(SEEDS[0], BROKEN_CLASS))
def test_random_edits_match_a_fresh_read(server: RawServer, script) -> None:
    text, edits = script
    n = next(URIS)
    edited, fresh = f"file:///incremental/edited-{n}.py", f"file:///incremental/fresh-{n}.py"
    open_document(server, edited, text)
    code_lenses(server, edited)  # analysed once before the edits: they are incremental
    version = 1
    for start, end, new in edits:
        version += 1
        change = {"range": {"start": position(text, start), "end": position(text, end)}}
        change["text"] = new
        params = {"textDocument": {"uri": edited, "version": version}, "contentChanges": [change]}
        server.send("textDocument/didChange", params, notify=True)
        text = text[:start] + new + text[end:]
    open_document(server, fresh, text)
    assert normalized(code_lenses(server, edited), edited) == normalized(
        code_lenses(server, fresh), fresh
    )
    assert diagnostics(server, edited, version) == diagnostics(server, fresh, 1)
    for uri in (edited, fresh):
        server.send("textDocument/didClose", {"textDocument": {"uri": uri}}, notify=True)


def test_one_line_edit_in_a_large_file_keeps_its_lenses(server: RawServer) -> None:
    """An edit far from any target leaves the lenses as they were; renaming Model (so that
    every module class becomes a target) changes them."""
    text = generate_document(20_000)
    uri = f"file:///incremental/large-{next(URIS)}.py"
    open_document(server, uri, text)
    before = code_lenses(server, uri)
    assert [lens["command"]["title"] for lens in before] == ["Optimize", "Profile"]
    line = text.split("\n").index("# latency-benchmark: edited here")
    edit = {"range": span(line, 0, line, 0)}
    server.send(
        "textDocument/didChange",
        {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{**edit, "text": "x = 1"}]},
        notify=True,
    )
    assert code_lenses(server, uri) == before
    model = next(i for i, row in enumerate(text.split("\n")) if row.startswith("class Model("))
    rename = {
        "range": span(model, 6, model, 11),
        "text": "Mode1",
    }
    server.send(
        "textDocument/didChange",
        {"textDocument": {"uri": uri, "version": 3}, "contentChanges": [rename]},
        notify=True,
    )
    targets = {lens["command"]["arguments"][0]["target"] for lens in code_lenses(server, uri)}
    assert "Mode1" in targets and "Model" not in targets
