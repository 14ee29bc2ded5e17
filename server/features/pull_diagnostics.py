"""Pulled diagnostics (textDocument/diagnostic), registered at initialize and only for a
client that pulls and can be asked to refresh; every other client gets pushed diagnostics
(`KernelAgentServer.publish`). Which kind a client gets is known only at initialize, so
this feature registers an initialize hook instead of a handler."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from server.diagnostics import SOURCE
from server.guards import guarded

if TYPE_CHECKING:
    from server.language_server import KernelAgentServer


def register(ls: KernelAgentServer) -> None:
    def on_initialize() -> None:
        if (
            ls.state.client.pull_diagnostics
            and types.TEXT_DOCUMENT_DIAGNOSTIC not in ls.protocol.fm.features
        ):
            _register_handler(ls)

    ls.initialize_hooks.append(on_initialize)


def _register_handler(ls: KernelAgentServer) -> None:
    @ls.feature(
        types.TEXT_DOCUMENT_DIAGNOSTIC,
        types.DiagnosticOptions(
            identifier=SOURCE, inter_file_dependencies=False, workspace_diagnostics=False
        ),
    )
    @guarded(ls, "diagnostics")
    async def pull_diagnostics(params: types.DocumentDiagnosticParams):
        return types.RelatedFullDocumentDiagnosticReport(
            items=ls.diagnostics(params.text_document.uri)
        )
