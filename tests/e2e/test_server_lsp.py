"""The language server end to end: `python -m server` over stdio, driven by pytest-lsp with
VS Code's and Neovim's capabilities. Jobs run the offline backend on a bench problem."""

from __future__ import annotations

import ast
import asyncio
import os
import signal
import sqlite3
import sys
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "bench/problems/13_gemm_divide_sum_scaling.py"
JOB_TIMEOUT_S = 150.0

ENV = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
ENV["PYTHONPATH"] = str(ROOT) + os.pathsep + ENV.get("PYTHONPATH", "")

HOT = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        e = torch.exp(x - x.max(dim=1, keepdim=True).values)
        return e / e.sum(dim=1, keepdim=True) + x.sum().item()


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
"""

TRITON = """import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(1,)](x, y, out, x.numel(), BLOCK=1024)
    return out
"""


class Recorder:
    """What the test client was asked to do by the server."""

    def __init__(self) -> None:
        self.edits: list[types.ApplyWorkspaceEditParams] = []
        self.requests: list[types.ShowMessageRequestParams] = []
        self.lens_refreshes = 0
        self.apply = True


RECORDERS: dict[int, Recorder] = {}


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=[sys.executable, "-m", "server"], server_env=ENV)
)
async def client(lsp_client: LanguageClient):
    recorder = RECORDERS[id(lsp_client)] = Recorder()

    def command_or_action(value: Any, _: type) -> types.Command | types.CodeAction:
        """lsprotocol reads any object with a "command" key as a Command; LSP says a Command's
        "command" is a string, a CodeAction's an object (VS Code tells them apart so)."""
        converter = lsp_client.protocol._converter
        if isinstance(value.get("command"), str):
            return converter.structure(value, types.Command)
        return converter.structure(value, types.CodeAction)

    lsp_client.protocol._converter.register_structure_hook(
        types.Command | types.CodeAction, command_or_action
    )

    @lsp_client.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: types.ApplyWorkspaceEditParams):
        recorder.edits.append(params)
        if recorder.apply:
            return types.ApplyWorkspaceEditResult(applied=True)
        return types.ApplyWorkspaceEditResult(applied=False, failure_reason="declined in test")

    @lsp_client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
    def message_request(params: types.ShowMessageRequestParams):
        recorder.requests.append(params)
        return None  # dismissed: the test decides through commands

    @lsp_client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
    def lens_refresh(params: Any):
        recorder.lens_refreshes += 1

    @lsp_client.feature(types.CLIENT_REGISTER_CAPABILITY)
    def register(params: Any):
        return None

    yield
    await lsp_client.shutdown_session()
    RECORDERS.pop(id(lsp_client), None)


def options(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "threads": 1,
        "timingBudget": 1.0,
        "search": {"maxEvals": 6, "iterations": 1, "plans": 2, "patience": 1},
        "memory": str(tmp_path / "memory.sqlite3"),
        "jail": True,
        **extra,
    }


async def start(
    lsp: LanguageClient,
    spec: str,
    tmp_path: Path,
    caps: types.ClientCapabilities | None = None,
    **extra,
) -> None:
    await lsp.initialize_session(
        types.InitializeParams(
            capabilities=caps or client_capabilities(spec),
            client_info=types.ClientInfo(name="Visual Studio Code" if "code" in spec else "Neovim"),
            initialization_options=options(tmp_path, **extra),
            root_uri=tmp_path.as_uri(),
        )
    )


def open_doc(lsp: LanguageClient, path: Path, text: str | None = None) -> str:
    text = text if text is not None else path.read_text()
    path.write_text(text)
    uri = path.as_uri()
    lsp.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=text
            )
        )
    )
    return uri


def change(
    lsp: LanguageClient, uri: str, version: int, start: tuple, end: tuple, text: str
) -> None:
    lsp.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(start=types.Position(*start), end=types.Position(*end)),
                    text=text,
                )
            ],
        )
    )


async def wait_for(predicate, timeout: float = JOB_TIMEOUT_S, what: str = "condition"):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def message_with(lsp: LanguageClient, text: str):
    return next((m for m in lsp.messages if text in m.message), None)


async def actions_at(lsp: LanguageClient, uri: str, line: int) -> list[types.CodeAction]:
    result = await lsp.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(start=types.Position(line, 0), end=types.Position(line, 0)),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    return list(result or [])


async def execute(lsp: LanguageClient, command: str, **args: Any) -> Any:
    return await lsp.workspace_execute_command_async(
        types.ExecuteCommandParams(command=command, arguments=[args])
    )


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.split("\n")) if needle in line)


def apply_text_edits(text: str, edits: list) -> str:
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def index(p: types.Position) -> int:
        return starts[p.line] + p.character if p.line < len(lines) else len(text)

    for edit in sorted(edits, key=lambda e: index(e.range.start), reverse=True):
        text = text[: index(edit.range.start)] + edit.new_text + text[index(edit.range.end) :]
    return text


async def raw_request(lsp: LanguageClient, method: str, params: Any) -> Any:
    """A request as raw JSON, for params the typed client would refuse to send."""
    msg_id = f"raw-{uuid.uuid4()}"
    future: Future = Future()
    lsp.protocol._request_futures[msg_id] = future
    lsp.protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    return await asyncio.wait_for(asyncio.wrap_future(future), 10)


async def lens_titles(lsp: LanguageClient, uri: str) -> list[str]:
    lenses = await lsp.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    return [lens.command.title for lens in lenses or [] if lens.command]


@pytest.mark.slow
async def test_vscode_optimize_progress_diagnostics_hover_accept(client: LanguageClient, tmp_path):
    lsp, recorder = client, RECORDERS[id(client)]
    await start(lsp, "visual-studio-code", tmp_path)
    path = tmp_path / "gemm.py"
    uri = open_doc(lsp, path, PROBLEM.read_text())
    text = path.read_text()
    model_line = line_of(text, "class Model(")

    actions = await actions_at(lsp, uri, model_line + 3)
    titles = [a.title for a in actions]
    assert "Optimize kernel `Model`" in titles and "Profile kernel `Model`" in titles
    optimize = next(a for a in actions if a.title == "Optimize kernel `Model`")
    assert optimize.kind == types.CodeActionKind.RefactorRewrite
    resolved = await lsp.code_action_resolve_async(optimize)
    assert resolved.command.command == "kernelAgent.optimize"
    assert "Accept (" not in " ".join(await lens_titles(lsp, uri))

    started = await lsp.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command=resolved.command.command, arguments=resolved.command.arguments
        )
    )
    assert started["started"] and started["pid"]
    running = await execute(lsp, "kernelAgent.jobs")
    assert [job["target"] for job in running] == ["Model"]
    assert any(t.startswith("$(sync~spin) Optimizing Model") for t in await lens_titles(lsp, uri))

    # the user types elsewhere while the job runs: a comment line above everything
    change(lsp, uri, 2, (0, 0), (0, 0), "# tuned\n")
    text = "# tuned\n" + text

    await wait_for(lambda: recorder.requests, what="the rewrite offer")
    offer = recorder.requests[0]
    assert "rewrite ready" in offer.message and "verified" in offer.message
    assert [a.title for a in offer.actions] == ["Accept", "Reject", "Show diff"]

    (token,) = [t for t in lsp.progress_reports if str(t).startswith("kernel-agent/")]
    reports = lsp.progress_reports[token]
    assert isinstance(reports[0], types.WorkDoneProgressBegin) and reports[0].cancellable
    assert isinstance(reports[-1], types.WorkDoneProgressEnd)
    assert any(isinstance(r, types.WorkDoneProgressReport) and r.percentage for r in reports)

    def hot():
        return [
            d
            for d in lsp.diagnostics.get(uri, [])
            if d.severity == types.DiagnosticSeverity.Information and d.source == "kernel-agent"
        ]

    diagnostics = await wait_for(hot, timeout=10, what="hot-line diagnostics")
    matmul = line_of(text, "torch.matmul(x, self.weight.T)")  # moved down by the comment
    top = next(d for d in diagnostics if d.range.start.line == matmul)
    assert "% of time · aten::" in top.message and "-bound" in top.message
    assert isinstance(top.code, str) and top.code  # a skill id

    hover = await lsp.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(matmul, 10),
        )
    )
    assert hover.contents.kind == types.MarkupKind.Markdown
    assert "| op | calls | time (ms) |" in hover.contents.value
    assert "What memory learned" in hover.contents.value

    titles = await lens_titles(lsp, uri)
    assert any(t.startswith("Accept (") and "verified" in t for t in titles)
    assert "Reject" in titles and "Show diff" in titles
    actions = await actions_at(lsp, uri, model_line + 1)
    assert any(a.title.startswith("Show pending rewrite of `Model`") for a in actions)

    shown = await execute(lsp, "kernelAgent.showDiff", uri=uri, target="Model")
    assert shown["shown"] and lsp.shown_documents[-1].uri == shown["uri"]
    diff = Path(shown["path"]).read_text()
    assert "+# Rewritten by kernel-agent: " in diff and "-        x = x / 2" in diff

    # what an editor's own diff view shows: the text now and the text after accepting
    (waiting,) = (await execute(lsp, "kernelAgent.pendingRewrite", uri=uri))["rewrites"]
    assert waiting["target"] == "Model" and waiting["original"] == text
    assert waiting["stale"] is None and waiting["mode"] == "replace"
    assert "verified" in waiting["summary"] and "x = x / 2" not in waiting["rewritten"]
    assert waiting["rewritten"].startswith("# tuned\n")

    accepted = await execute(lsp, "kernelAgent.accept", uri=uri, target="Model")
    assert accepted["applied"], accepted
    edit = recorder.edits[-1].edit
    (document_edit,) = edit.document_changes
    assert document_edit.text_document.version == 2
    assert all(e.annotation_id == "kernel-agent.rewrite" for e in document_edit.edits)
    assert edit.change_annotations["kernel-agent.rewrite"].needs_confirmation
    new_text = apply_text_edits(text, document_edit.edits)
    assert new_text == waiting["rewritten"]
    module = ast.parse(new_text)
    assert [n.name for n in module.body if isinstance(n, ast.ClassDef)] == ["Model"]
    assert new_text.startswith("# tuned\n") and "def get_inputs():" in new_text
    assert "x = x / 2" not in new_text  # the original forward was replaced
    assert accepted["feedback"] >= 1  # the lessons behind this kernel are marked accepted
    with sqlite3.connect(tmp_path / "memory.sqlite3") as db:
        assert db.execute("SELECT COUNT(*) FROM experiences WHERE feedback='accepted'").fetchone()[
            0
        ]
    assert "Accept (" not in " ".join(await lens_titles(lsp, uri))
    assert message_with(lsp, "applied the rewrite of `Model` in place")
    assert await execute(lsp, "kernelAgent.pendingRewrite", uri=uri, target="Model") == {
        "rewrites": []
    }


@pytest.mark.slow
async def test_neovim_edit_during_job_is_refused_then_rejected(client: LanguageClient, tmp_path):
    lsp, recorder = client, RECORDERS[id(client)]
    await start(lsp, "neovim", tmp_path, llm={"backend": "anthropic", "model": "claude-test"})
    path = tmp_path / "gemm.py"
    uri = open_doc(lsp, path, PROBLEM.read_text())
    text = path.read_text()
    model_line = line_of(text, "class Model(")

    titles = [a.title for a in await actions_at(lsp, uri, model_line)]
    assert "Optimize `Model` with `claude-test`" in titles
    refused = await execute(lsp, "kernelAgent.optimize", uri=uri, target="Model", backend="llm")
    assert not refused["started"]
    key_message = message_with(lsp, "needs an API key")
    assert (
        key_message.type == types.MessageType.Error and "ANTHROPIC_API_KEY" in key_message.message
    )

    started = await execute(lsp, "kernelAgent.optimize", uri=uri, target="Model")
    assert started["started"]
    again = await execute(lsp, "kernelAgent.optimize", uri=uri, target="Model")
    assert not again["started"] and "already has" in again["reason"]

    divide = line_of(text, "x = x / 2")
    column = text.split("\n")[divide].index("2")
    change(lsp, uri, 2, (divide, column), (divide, column + 1), "2.0")

    await wait_for(lambda: message_with(lsp, "rewrite ready") or recorder.requests, what="offer")
    result = await execute(lsp, "kernelAgent.accept", uri=uri, target="Model")
    assert not result["applied"] and "changed since it was optimised" in result["reason"]
    assert recorder.edits == []  # nothing was sent to overwrite the user's edit
    warning = message_with(lsp, "changed since it was optimised")
    assert warning.type == types.MessageType.Warning

    shown = await execute(lsp, "kernelAgent.showDiff", uri=uri, target="Model")
    assert "against the code as it was" in Path(shown["path"]).read_text()
    rejected = await execute(lsp, "kernelAgent.reject", uri=uri, target="Model")
    assert rejected["rejected"]
    titles = await lens_titles(lsp, uri)
    assert titles[:1] == ["Optimize"] and "Profile" in titles


async def test_cancel_from_progress_ends_the_worker(client: LanguageClient, tmp_path):
    lsp = client
    await start(lsp, "visual-studio-code", tmp_path)
    uri = open_doc(lsp, tmp_path / "gemm.py", PROBLEM.read_text())
    started = await execute(lsp, "kernelAgent.optimize", uri=uri, target="Model")
    token = f"kernel-agent/{started['jobId']}"
    await wait_for(lambda: lsp.progress_reports.get(token), timeout=20, what="progress begin")
    lsp.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
    await wait_for(
        lambda: isinstance(lsp.progress_reports[token][-1], types.WorkDoneProgressEnd),
        timeout=40,
        what="progress end",
    )
    assert await execute(lsp, "kernelAgent.jobs") == []
    await wait_for(lambda: message_with(lsp, "cancelled"), timeout=10, what="cancel message")
    with pytest.raises(ProcessLookupError):
        os.kill(started["pid"], 0)


async def test_killed_worker_is_a_failed_job(client: LanguageClient, tmp_path):
    lsp = client
    await start(lsp, "neovim", tmp_path)
    uri = open_doc(lsp, tmp_path / "gemm.py", PROBLEM.read_text())
    started = await execute(lsp, "kernelAgent.cancel", uri=uri, target="Model")
    assert started == {"cancelled": False}
    started = await execute(lsp, "kernelAgent.optimize", uri=uri, target="Model")
    os.kill(started["pid"], signal.SIGKILL)
    failed = await wait_for(lambda: message_with(lsp, "failed"), timeout=30, what="failure")
    assert failed.type == types.MessageType.Error
    assert "optimizing `Model` failed" in failed.message and "signal 9" in failed.message
    assert "Traceback" not in failed.message and "\n" not in failed.message
    assert await execute(lsp, "kernelAgent.jobs") == []
    titles = await lens_titles(lsp, uri)
    assert titles[0] == "Optimize"


async def test_target_that_cannot_be_built_is_one_clear_error(client: LanguageClient, tmp_path):
    lsp = client
    await start(lsp, "neovim", tmp_path)
    broken = PROBLEM.read_text().replace(
        "super().__init__()", "super().__init__()\n        raise ValueError('bad size')"
    )
    uri = open_doc(lsp, tmp_path / "broken.py", broken)
    started = await execute(lsp, "kernelAgent.profile", uri=uri, target="Model")
    assert started["started"]
    failed = await wait_for(lambda: message_with(lsp, "failed"), timeout=60, what="failure")
    assert failed.type == types.MessageType.Error and "bad size" in failed.message
    assert "Traceback" not in failed.message and "\n" not in failed.message


async def test_shutdown_ends_every_worker(client: LanguageClient, tmp_path):
    lsp = client
    await start(lsp, "visual-studio-code", tmp_path)
    uri = open_doc(lsp, tmp_path / "gemm.py", PROBLEM.read_text())
    started = await execute(lsp, "kernelAgent.optimize", uri=uri, target="Model")
    os.kill(started["pid"], 0)  # running
    await lsp.shutdown_async(None)  # returns once the workers have ended
    with pytest.raises(ProcessLookupError):
        os.kill(started["pid"], 0)
    lsp.exit(None)
    await lsp._server.wait()
    lsp.capabilities = None  # the fixture's teardown has nothing left to shut down


async def test_hints_pushed_at_once_and_kept_in_step_with_edits(client: LanguageClient, tmp_path):
    lsp = client
    await start(lsp, "neovim", tmp_path)
    uri = open_doc(lsp, tmp_path / "hot.py", HOT)
    hints = await wait_for(lambda: lsp.diagnostics.get(uri), timeout=10, what="hints")
    assert {d.code for d in hints} == {"torch-library-softmax", "torch-avoid-host-sync"}
    assert all(d.severity == types.DiagnosticSeverity.Hint for d in hints)
    sync_line = line_of(HOT, ".item()")
    lsp.diagnostics.pop(uri)
    change(lsp, uri, 2, (0, 0), (0, 0), "import math\n")
    moved = await wait_for(lambda: lsp.diagnostics.get(uri), timeout=10, what="moved hints")
    assert any(
        d.code == "torch-avoid-host-sync" and d.range.start.line == sync_line + 1 for d in moved
    )
    start_col = (HOT.split("\n")[sync_line]).index(" + x.sum().item()")
    lsp.diagnostics.pop(uri)
    change(lsp, uri, 3, (sync_line + 1, start_col), (sync_line + 1, start_col + 17), "")
    fixed = await wait_for(
        lambda: uri in lsp.diagnostics and lsp.diagnostics[uri], timeout=10, what="fix"
    )
    assert {d.code for d in fixed} == {"torch-library-softmax"}


async def test_pull_diagnostics_when_the_client_supports_them(client: LanguageClient, tmp_path):
    lsp = client
    caps = client_capabilities("visual-studio-code")
    caps.text_document.diagnostic = types.DiagnosticClientCapabilities(dynamic_registration=False)
    caps.workspace.diagnostics = types.DiagnosticWorkspaceClientCapabilities(refresh_support=True)
    result = await lsp.initialize_session(
        types.InitializeParams(capabilities=caps, initialization_options=options(tmp_path))
    )
    assert result.capabilities.diagnostic_provider is not None
    assert result.capabilities.code_action_provider.resolve_provider
    uri = open_doc(lsp, tmp_path / "hot.py", HOT)
    report = await lsp.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert {d.code for d in report.items} == {"torch-library-softmax", "torch-avoid-host-sync"}
    await asyncio.sleep(0.3)
    assert uri not in lsp.diagnostics  # pulled, not pushed: no duplicates


async def test_missing_inputs_explained_with_a_snippet_and_a_quick_fix(
    client: LanguageClient, tmp_path
):
    lsp = client
    await start(lsp, "visual-studio-code", tmp_path)
    uri = open_doc(lsp, tmp_path / "kern.py", TRITON)
    actions = await actions_at(lsp, uri, line_of(TRITON, "def add_kernel"))
    optimize = next(a for a in actions if a.title == "Optimize Triton kernel `add`")
    assert "get_inputs()" in optimize.disabled.reason
    fix = next(a for a in actions if a.kind == types.CodeActionKind.QuickFix)
    resolved = await lsp.code_action_resolve_async(fix)
    (edit,) = resolved.edit.changes[uri]
    assert "def get_inputs():" in edit.new_text and "return [x, y]" in edit.new_text
    recorder = RECORDERS[id(lsp)]
    result = await execute(lsp, "kernelAgent.optimize", uri=uri, target="add")
    assert not result["started"] and "return [x, y]" in result["snippet"]
    asked = await wait_for(lambda: recorder.requests, timeout=10, what="the template offer")
    assert "cannot be optimized yet" in asked[0].message
    assert [a.title for a in asked[0].actions] == ["Insert template"]
    assert "Optimize: add get_inputs() first" in await lens_titles(lsp, uri)


async def test_bad_settings_and_malformed_requests_keep_the_server_alive(
    client: LanguageClient, tmp_path
):
    lsp = client
    await start(
        lsp,
        "neovim",
        tmp_path,
        beam=0,
        rewriteMode="sideways",
        apiKeys={"anthropic": "sk-canary-9"},
    )
    await wait_for(lambda: message_with(lsp, "Kernel Agent settings"), timeout=10, what="settings")
    warning = message_with(lsp, "Kernel Agent settings")
    assert (
        "beam" in warning.message
        and "rewriteMode" in warning.message
        and "\n" not in warning.message
    )
    uri = open_doc(lsp, tmp_path / "gemm.py", PROBLEM.read_text())
    with pytest.raises(JsonRpcException):
        await raw_request(lsp, "textDocument/hover", {"textDocument": 3})
    with pytest.raises(JsonRpcException):
        await raw_request(lsp, "workspace/executeCommand", {"command": "kernelAgent.accept"})
    with pytest.raises(JsonRpcException, match="object argument"):
        await lsp.workspace_execute_command_async(
            types.ExecuteCommandParams(command="kernelAgent.optimize", arguments=[42])
        )
    with pytest.raises(JsonRpcException, match="no optimisation target"):
        await execute(lsp, "kernelAgent.profile", uri=uri, target="Nope")
    nothing = await execute(lsp, "kernelAgent.accept", uri=uri, target="Model")
    assert nothing == {"applied": False, "reason": "no rewrite waiting"}
    assert await execute(lsp, "kernelAgent.pendingRewrite", uri=uri) == {"rewrites": []}
    with pytest.raises(JsonRpcException, match="'uri'"):
        await execute(lsp, "kernelAgent.pendingRewrite", target="Model")
    assert "Optimize" in await lens_titles(lsp, uri)  # still serving
    logs = " ".join(m.message for m in lsp.log_messages + lsp.messages)
    assert "sk-canary-9" not in logs and "keys from client: anthropic" in logs


async def test_configuration_changes_are_picked_up(client: LanguageClient, tmp_path):
    lsp = client
    lsp.set_configuration(
        {"llm": {"backend": "openai", "model": "qwen-local", "baseUrl": "http://localhost:1/v1"}},
        section="kernelAgent",
    )
    await start(lsp, "visual-studio-code", tmp_path)
    await wait_for(lambda: any("qwen-local" in m.message for m in lsp.log_messages), timeout=10)
    uri = open_doc(lsp, tmp_path / "gemm.py", PROBLEM.read_text())
    line = line_of(PROBLEM.read_text(), "class Model(")
    assert "Optimize `Model` with `qwen-local`" in [
        a.title for a in await actions_at(lsp, uri, line)
    ]
    lsp.set_configuration(
        {"llm": {"backend": "offline"}, "rewriteMode": "bogus"}, section="kernelAgent"
    )
    lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await wait_for(lambda: message_with(lsp, "rewriteMode"), timeout=10, what="settings reload")
    titles = [a.title for a in await actions_at(lsp, uri, line)]
    assert not any("with `" in t for t in titles)


@pytest.mark.slow
async def test_profile_on_save_marks_hot_lines(client: LanguageClient, tmp_path):
    lsp = client
    await start(lsp, "neovim", tmp_path, profileOnSave=True)
    path = tmp_path / "gemm.py"
    uri = open_doc(lsp, path, PROBLEM.read_text())
    lsp.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )

    def hot():
        return [
            d
            for d in lsp.diagnostics.get(uri, [])
            if d.severity == types.DiagnosticSeverity.Information
        ]

    found = await wait_for(hot, timeout=JOB_TIMEOUT_S, what="profile diagnostics")
    assert all(d.source == "kernel-agent" and "% of time" in d.message for d in found)
    assert not any("profiled" in m.message for m in lsp.messages)  # on save: quiet
