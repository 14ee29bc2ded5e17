"""Job state pushed to the client: the server sends `kernelAgent/jobsChanged` (the running
jobs, as `kernelAgent.jobs` answers) when a job starts, advances and ends, to a client that
declared `experimental.kernelAgent.jobsChanged` (the VS Code extension, which no longer
polls), and nothing to one that did not (Neovim). A client that declared `rewriteUri` is
shown a rewrite's diff as a `kernel-agent-rewrite:` URI instead of a temporary file."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities

from tests.e2e.test_server_lsp import (
    PROBLEM,
    RECORDERS,
    client,  # noqa: F401  (the pytest-lsp fixture the tests below take)
    execute,
    message_with,
    open_doc,
    start,
    wait_for,
)

JOBS_CHANGED = "kernelAgent/jobsChanged"
BROKEN = PROBLEM.read_text().replace(
    "super().__init__()", "super().__init__()\n        raise ValueError('bad size')"
)


def pushes_to(lsp: LanguageClient) -> list[list[dict[str, Any]]]:
    """Every job list the server pushes to this client, in order."""
    pushed: list[list[dict[str, Any]]] = []

    @lsp.feature(JOBS_CHANGED)
    def jobs_changed(params: Any) -> None:
        # pygls reads an unknown method's params as namedtuples ("Object")
        jobs = params["jobs"] if isinstance(params, dict) else params.jobs
        pushed.append([dict(job) if isinstance(job, dict) else job._asdict() for job in jobs])

    return pushed


def declaring(spec: str) -> types.ClientCapabilities:
    caps = client_capabilities(spec)
    caps.experimental = {"kernelAgent": {"jobsChanged": True, "rewriteUri": True}}
    return caps


async def test_the_job_list_is_pushed_when_a_job_starts_and_ends(client: LanguageClient, tmp_path):  # noqa: F811
    lsp = client
    pushed = pushes_to(lsp)
    await start(lsp, "visual-studio-code", tmp_path, caps=declaring("visual-studio-code"))
    uri = open_doc(lsp, tmp_path / "broken.py", BROKEN)
    started = await execute(lsp, "kernelAgent.profile", uri=uri, target="Model")
    assert started["started"]
    await wait_for(lambda: message_with(lsp, "failed"), timeout=60, what="the job's end")
    await wait_for(lambda: pushed and pushed[-1] == [], timeout=10, what="the last push")
    first = pushed[0]
    assert [(j["jobId"], j["kind"], j["target"], j["uri"]) for j in first] == [
        (started["jobId"], "profile", "Model", uri)
    ]
    assert set(first[0]) == {
        "jobId",
        "kind",
        "uri",
        "target",
        "state",
        "percent",
        "message",
        "pid",
        "error",
    }
    assert first[0]["state"] == "running"
    assert await execute(lsp, "kernelAgent.jobs") == pushed[-1]


async def test_a_client_that_did_not_declare_it_gets_no_push(client: LanguageClient, tmp_path):  # noqa: F811
    lsp = client
    pushed = pushes_to(lsp)
    await start(lsp, "neovim", tmp_path)
    uri = open_doc(lsp, tmp_path / "broken.py", BROKEN)
    started = await execute(lsp, "kernelAgent.profile", uri=uri, target="Model")
    assert started["started"]
    await wait_for(lambda: message_with(lsp, "failed"), timeout=60, what="the job's end")
    assert await execute(lsp, "kernelAgent.jobs") == []  # a later message: any push came first
    assert pushed == []


@pytest.mark.slow
async def test_optimize_pushes_its_progress_and_shows_the_diff_by_uri(
    client: LanguageClient,  # noqa: F811
    tmp_path,
):
    lsp, recorder = client, RECORDERS[id(client)]
    pushed = pushes_to(lsp)
    await start(lsp, "visual-studio-code", tmp_path, caps=declaring("visual-studio-code"))
    uri = open_doc(lsp, tmp_path / "gemm.py", PROBLEM.read_text())
    started = await execute(lsp, "kernelAgent.optimize", uri=uri, target="Model")
    assert started["started"]
    await wait_for(lambda: recorder.requests, what="the rewrite offer")
    await wait_for(lambda: pushed and pushed[-1] == [], timeout=10, what="the last push")
    percents = [jobs[0]["percent"] for jobs in pushed if jobs]
    assert percents[0] == 0 and max(percents) > 0  # started, then advanced
    assert len(pushed) == len(percents) + 1  # and one push when it ended

    shown = await execute(lsp, "kernelAgent.showDiff", uri=uri, target="Model")
    assert shown["shown"] and "path" not in shown  # no temporary file for this client
    assert shown["uri"].startswith("kernel-agent-rewrite:/gemm%20%28Model%2C%20rewrite%29.py?")
    assert lsp.shown_documents[-1].uri == shown["uri"]
    query = parse_qs(unquote(shown["uri"].split("?", 1)[1]))
    assert query == {"uri": [uri], "target": ["Model"], "side": ["rewritten"]}
