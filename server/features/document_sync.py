"""Documents as the editor edits them: keep our copy and its profile findings in step with the
client's text, profile on save when asked, and push diagnostics (clients that pull them get
`pull_diagnostics` instead)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from server.diagnostics import shift
from server.running_jobs import start_job

if TYPE_CHECKING:
    from server.language_server import KernelAgentServer


def register(ls: KernelAgentServer) -> None:
    @ls.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: types.DidOpenTextDocumentParams) -> None:
        item = params.text_document
        ls.docs.open(item.uri, item.text, item.version)
        ls.publish(item.uri)

    @ls.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        doc = ls.docs.get(uri)
        if doc is None:
            return
        encoding = ls.encoding
        moved = False
        for change in params.content_changes:
            if isinstance(change, types.TextDocumentContentChangePartial):
                r = change.range
                edit = doc.apply(
                    (r.start.line, r.start.character),
                    (r.end.line, r.end.character),
                    change.text,
                    params.text_document.version,
                    encoding,
                )
            else:
                edit = doc.replace_all(change.text, params.text_document.version)
            for key, view in ls.state.views.items():
                if key[0] == uri:
                    view.findings, changed = shift(view.findings, edit)
                    moved |= changed
        ls.publish_soon(uri)
        if moved:
            ls.refresh_lenses()

    @ls.feature(types.TEXT_DOCUMENT_DID_SAVE)
    async def did_save(params: types.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        doc = ls.docs.get(uri)
        if doc is None or not ls.state.settings.profile_on_save:
            return
        for target in ls.parsed(doc).targets:
            if target.ready and ls.jobs.find(uri, target.name) is None:
                await start_job(ls, "profile", doc, target, backend="offline", explicit=False)

    @ls.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.cancel_publish(uri)
        ls.docs.close(uri)
        ls.state.parsed.pop(uri, None)
        for key in [k for k in ls.state.views if k[0] == uri]:
            ls.state.views.pop(key)
        if not ls.state.client.pull_diagnostics:
            ls.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=uri, diagnostics=[])
            )
