"""One speedup per kernel in the editor: the language server (`python -m server` over stdio,
driven by pytest-lsp) shows a finished job's result with one figure, formatted one way, in
the lens, the notification, the hover and the progress's last message, and words the
search's earlier, running best as the search's own. Log lines say verdicts in words."""

from __future__ import annotations

import ast
import re

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.e2e.test_server_lsp import (
    PROBLEM,
    RECORDERS,
    ROOT,
    client,  # noqa: F401  (the pytest-lsp fixture the tests below take)
    execute,
    lens_titles,
    line_of,
    open_doc,
    start,
    wait_for,
)

SPEEDUP = re.compile(r"\d+\.\d+x")
RAW_VERDICTS = ("no_code", "compile_error", "runtime_error")


def _finished_event(lsp: LanguageClient) -> dict:
    """The worker's `finished` event, as the server logs it: the job result's own speedup."""
    prefix = "[Model] finished: "
    line = next(m.message for m in lsp.log_messages if m.message.startswith(prefix))
    return ast.literal_eval(line[len(prefix) :])


@pytest.mark.slow
async def test_a_finished_job_shows_one_speedup_everywhere(client: LanguageClient, tmp_path):  # noqa: F811
    lsp, recorder = client, RECORDERS[id(client)]
    await start(lsp, "visual-studio-code", tmp_path)
    path = tmp_path / "gemm.py"
    uri = open_doc(lsp, path, PROBLEM.read_text())
    started = await execute(lsp, "kernelAgent.optimize", uri=uri, target="Model")
    assert started["started"], started
    await wait_for(lambda: recorder.requests, what="the rewrite offer")

    event = _finished_event(lsp)
    assert event["improved"] and event["verdict"] == "correct"
    figure = f"{event['speedup']:.2f}x"
    said = f"{figure} faster, verified"

    offer = recorder.requests[0].message
    assert said in offer and SPEEDUP.findall(offer) == [figure], offer
    titles = await lens_titles(lsp, uri)
    assert f"Accept ({said})" in titles, titles
    assert [t for t in titles if SPEEDUP.search(t)] == [f"Accept ({said})"]
    hover = await lsp.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line_of(PROBLEM.read_text(), "class Model("), 7),
        )
    )
    assert hover is not None and said in hover.contents.value
    assert SPEEDUP.findall(hover.contents.value) == [figure], hover.contents.value
    (waiting,) = (await execute(lsp, "kernelAgent.pendingRewrite", uri=uri))["rewrites"]
    assert waiting["summary"] == said
    # every candidate's fate, summed up in one line: the hover and the pending rewrite say it
    fates = re.fullmatch(r"(\d+) candidates?: 1 chosen(, \d+ [a-z ]+)*", waiting["candidates"])
    assert fates, waiting["candidates"]
    assert f"The search's {waiting['candidates']}." in hover.contents.value
    logged = [m.message for m in lsp.log_messages if "] fate of " in m.message]
    assert len(logged) == int(fates.group(1)), logged

    # the progress: the search's best is labelled as its own; the end is the result's figure
    (token,) = [t for t in lsp.progress_reports if str(t).startswith("kernel-agent/")]
    reports = lsp.progress_reports[token]
    assert isinstance(reports[-1], types.WorkDoneProgressEnd) and reports[-1].message == said
    searching = [r.message for r in reports[1:-1] if r.message and "iteration" in r.message]
    assert searching and all("searching: best " in m and "x so far" in m for m in searching)
    assert any(m.endswith(" · 1 candidate") for m in searching), searching
    assert not [m for m in searching if re.search(r"(?<!\d)1 candidates", m)]

    candidates = [m.message for m in lsp.log_messages if "] candidate " in m.message]
    assert candidates and not [m for m in candidates if any(v in m for v in RAW_VERDICTS)]


@pytest.mark.long  # a whole optimize job over LSP: test-all
@pytest.mark.slow
async def test_an_outcome_counts_in_words_with_right_plurals(client: LanguageClient, tmp_path):  # noqa: F811
    """One evaluation on a sum the offline passes cannot beat on a CPU: the notification
    counts "1 candidate evaluated" (or, should it be faster here, "after N evaluations"),
    never "1 candidates", and names no internal verdict."""
    lsp = client
    search = {"maxEvals": 1, "iterations": 1, "plans": 1, "patience": 1}
    await start(lsp, "neovim", tmp_path, search=search)
    problem = ROOT / "bench/problems/05_sum_reduction.py"
    uri = open_doc(lsp, tmp_path / "sum.py", problem.read_text())
    started = await execute(lsp, "kernelAgent.optimize", uri=uri, target="Model")
    assert started["started"], started
    outcome = ("no verified improvement", "rewrite ready")
    recorder = RECORDERS[id(client)]

    def shown() -> str | int:
        """The outcome as the user sees it: a notification, or (Neovim answers message
        actions) the Accept / Reject / Show diff request a faster rewrite comes with."""
        texts = [m.message for m in lsp.messages] + [r.message for r in recorder.requests]
        return next((t for t in texts if any(o in t for o in outcome)), 0)

    said = await wait_for(
        shown,
        timeout=450,  # a profile, a torch.compile candidate and its confirmation, under load
        what="the job's outcome",
    )
    evaluations = int(_finished_event(lsp)["evaluations"])
    if "no verified improvement" in said:
        counted = "1 candidate" if evaluations == 1 else f"{evaluations} candidates"
        assert f"({counted} evaluated; stopped: " in said, said
    else:
        counted = "1 evaluation" if evaluations == 1 else f"{evaluations} evaluations"
        assert f"after {counted}." in said, said
    assert not [v for v in (*RAW_VERDICTS, "timeout") if v in said], said
    texts = [said, *(m.message for m in lsp.log_messages)]
    assert not [t for t in texts if re.search(r"(?<!\d)1 (candidates|evaluations)\b", t)]
