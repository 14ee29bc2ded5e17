"""What the editor shows on a target without being asked: code lenses (actions, a running
job's progress, a waiting rewrite's Accept · Reject · Show diff) and hovers (a hot line's
profile and lessons from memory, or the rewrite waiting on a target)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from lsprotocol import types

from server import lenses as L
from server.diagnostics import Finding, ProfileView
from server.documents import Document
from server.guards import guarded
from server.hover import hot_line_markdown, lessons_for
from server.locations import position

if TYPE_CHECKING:
    from server.language_server import KernelAgentServer


async def hot_line_hover(
    ls: KernelAgentServer, finding: Finding, view: ProfileView, doc: Document
) -> types.Hover:
    """A hot line's ops and what memory learned on similar kernels (memory is read in a
    thread: SQLite blocks)."""
    try:
        lessons = await asyncio.to_thread(lambda: lessons_for(ls.memory(), finding, view))
    except Exception as error:
        ls.log_line(f"memory lookup failed: {error}", types.MessageType.Warning)
        lessons = []
    text = doc.line(finding.line).rstrip("\r")
    start = len(text) - len(text.lstrip())
    return types.Hover(
        contents=types.MarkupContent(
            kind=types.MarkupKind.Markdown, value=hot_line_markdown(finding, view, lessons)
        ),
        range=types.Range(
            start=position(doc, finding.line, start, ls.encoding),
            end=position(doc, finding.line, len(text), ls.encoding),
        ),
    )


def register(ls: KernelAgentServer) -> None:
    @ls.feature(types.TEXT_DOCUMENT_CODE_LENS, types.CodeLensOptions(resolve_provider=False))
    @guarded(ls, "code lenses")
    def code_lens(params: types.CodeLensParams):
        uri = params.text_document.uri
        doc = ls.docs.get(uri)
        if doc is None:
            return None
        targets = ls.parsed(doc).targets
        jobs = {
            r.spec.target: r.view
            for r in ls.state.running.values()
            if r.spec.uri == uri and not r.ended
        }
        pending = {t: rw for (u, t), rw in ls.state.pending.items() if u == uri}
        items = L.lenses_for(
            uri, targets, jobs, pending, ls.state.settings.llm_model_label, ls.state.client.icons
        )
        out = []
        for lens in items:
            start = types.Position(line=lens.line, character=0)
            out.append(
                types.CodeLens(
                    range=types.Range(start=start, end=start),
                    command=types.Command(
                        title=lens.title, command=lens.command, arguments=lens.arguments
                    ),
                )
            )
        return out

    @ls.feature(types.TEXT_DOCUMENT_HOVER)
    @guarded(ls, "hover")
    async def hover(params: types.HoverParams):
        uri = params.text_document.uri
        doc = ls.docs.get(uri)
        if doc is None:
            return None
        line = params.position.line
        for view in [v for (u, _t), v in ls.state.views.items() if u == uri]:
            for finding in view.findings:
                if finding.line == line:
                    return await hot_line_hover(ls, finding, view, doc)
        target = next((t for t in ls.parsed(doc).targets if t.name_line == line), None)
        if target is not None and (uri, target.name) in ls.state.pending:
            rewrite = ls.state.pending[(uri, target.name)]
            text = (
                f"**kernel-agent** · a rewrite of `{target.name}` is waiting: {rewrite.summary} "
                f"on {rewrite.device}"
                + (f" ({', '.join(rewrite.methods)})" if rewrite.methods else "")
                + (f".\n\nThe search's {rewrite.candidates}" if rewrite.candidates else "")
                + ".\n\nUse the code lens above: Accept · Reject · Show diff."
            )
            return types.Hover(
                contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text)
            )
        return None
