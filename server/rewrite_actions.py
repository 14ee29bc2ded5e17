"""A verified rewrite waiting on a target: accept it (a versioned workspace edit, refused
when the target changed since the search started), reject it, or read it as the text now and
the text accepting it would give. Both decisions are written to the optimisation memory."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from agents.targets.edits import (
    AcceptPlan,
    EditRefused,
    Rewrite,
    TextChange,
    apply_changes,
    build_accept,
)
from server.documents import Document
from server.feedback import record_decision
from server.locations import read_disk, text_edit_range

if TYPE_CHECKING:
    from server.language_server import KernelAgentServer

ANNOTATION_ID = "kernel-agent.rewrite"


async def accept(ls: KernelAgentServer, value: dict[str, Any]) -> dict[str, Any]:
    """Apply the waiting rewrite through the client (it may ask the user to confirm)."""
    uri, name = value["uri"], value["target"]
    rewrite = ls.state.pending.get((uri, name))
    if rewrite is None:
        ls.tell(f"Kernel Agent: no rewrite of `{name}` is waiting.", types.MessageType.Info)
        return {"applied": False, "reason": "no rewrite waiting"}
    doc = ls.docs.get(uri)
    text = doc.text if doc is not None else read_disk(uri)
    if text is None:
        ls.tell(
            f"Kernel Agent: cannot read {uri}; open it and accept again.",
            types.MessageType.Error,
        )
        return {"applied": False, "reason": "document unavailable"}
    try:
        plan = build_accept(text, rewrite, ls.state.settings.rewrite_mode)
    except EditRefused as refusal:
        ls.tell(f"Kernel Agent: {refusal}", types.MessageType.Warning)
        return {"applied": False, "reason": str(refusal)}
    label = f"Kernel Agent: {plan.mode} `{name}` ({rewrite.summary})"
    edit = _workspace_edit(ls, uri, doc, text, plan.changes, label)
    result = await ls.workspace_apply_edit_async(
        types.ApplyWorkspaceEditParams(edit=edit, label=label)
    )
    if not result.applied:
        reason = result.failure_reason or "the editor declined it"
        ls.tell(
            f"Kernel Agent: the rewrite of `{name}` was not applied ({reason}); "
            "it is still waiting.",
            types.MessageType.Warning,
        )
        return {"applied": False, "reason": reason}
    if ls.state.pending.get((uri, name)) is rewrite:
        ls.state.pending.pop((uri, name))
    decision = await _record(ls, name, rewrite.source, accepted=True)
    ls.tell(_applied_message(name, rewrite, plan))
    ls.refresh_lenses()
    return {
        "applied": True,
        "mode": plan.mode,
        "name": plan.new_name,
        "feedback": decision.lessons,
    }


async def _record(ls: KernelAgentServer, name: str, source: str, *, accepted: bool):
    """The user's decision into memory (off the event loop), and a line in the log."""
    decision = await asyncio.to_thread(
        record_decision,
        source,
        accepted,
        ls.state.settings.memory_path,
        ls.state.settings.memory_enabled,
    )
    ls.log_line(f"[{name}] feedback: {decision.summary}")
    return decision


async def reject(ls: KernelAgentServer, value: dict[str, Any]) -> dict[str, Any]:
    """Drop the waiting rewrite; memory ranks the lessons behind it lower."""
    uri, name = value["uri"], value["target"]
    rewrite = ls.state.pending.pop((uri, name), None)
    if rewrite is None:
        ls.tell(f"Kernel Agent: no rewrite of `{name}` is waiting.", types.MessageType.Info)
        return {"rejected": False}
    decision = await _record(ls, name, rewrite.source, accepted=False)
    ls.tell(f"Kernel Agent: discarded the rewrite of `{name}`; memory will rank its lessons lower.")
    ls.refresh_lenses()
    return {"rejected": True, "feedback": decision.lessons}


def preview(ls: KernelAgentServer, uri: str, rewrite: Rewrite) -> tuple[str, str, Any, str]:
    """The document's text now, as accepting would leave it, the plan, and why the
    comparison is against the search's snapshot instead ("" when it is not)."""
    doc = ls.docs.get(uri)
    text = doc.text if doc is not None else (read_disk(uri) or rewrite.snapshot)
    refusal = ""
    try:
        plan = build_accept(text, rewrite, ls.state.settings.rewrite_mode)
    except EditRefused as error:
        refusal = str(error)
        text = rewrite.snapshot
        plan = build_accept(text, rewrite, ls.state.settings.rewrite_mode)
    return text, apply_changes(text, plan.changes), plan, refusal


def pending_rewrites(ls: KernelAgentServer, value: dict[str, Any]) -> dict[str, Any]:
    """The waiting rewrites of a document (of one target when `target` is given), each as
    the text now and the text accepting it would give: what an editor shows as a diff."""
    uri, name = value["uri"], value.get("target")
    out = []
    for (rewrite_uri, target), rewrite in sorted(ls.state.pending.items()):
        if rewrite_uri != uri or (name is not None and target != name):
            continue
        original, rewritten, plan, refusal = preview(ls, uri, rewrite)
        out.append(
            {
                "uri": uri,
                "target": target,
                "original": original,
                "rewritten": rewritten,
                "summary": rewrite.summary,
                "candidates": rewrite.candidates or None,
                "mode": plan.mode,
                "stale": refusal or None,
            }
        )
    return {"rewrites": out}


def _workspace_edit(
    ls: KernelAgentServer,
    uri: str,
    doc: Document | None,
    text: str,
    changes: list[TextChange],
    label: str,
) -> types.WorkspaceEdit:
    """The accept's changes as a workspace edit: versioned and annotated (so the client asks
    for confirmation) where the client supports it, plain text edits otherwise."""
    lines = text.split("\n")
    encoding = ls.encoding
    client = ls.state.client
    edits: list[types.TextEdit | types.AnnotatedTextEdit] = []
    for change in changes:
        r = text_edit_range(lines, change, encoding)
        if client.annotations and client.document_changes:
            edits.append(
                types.AnnotatedTextEdit(range=r, new_text=change.text, annotation_id=ANNOTATION_ID)
            )
        else:
            edits.append(types.TextEdit(range=r, new_text=change.text))
    if not client.document_changes:
        return types.WorkspaceEdit(changes={uri: edits})
    annotations = (
        {
            ANNOTATION_ID: types.ChangeAnnotation(
                label=label,
                needs_confirmation=True,
                description="A verified, faster rewrite of the kernel",
            )
        }
        if client.annotations
        else None
    )
    return types.WorkspaceEdit(
        document_changes=[
            types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(
                    uri=uri, version=doc.version if doc is not None else None
                ),
                edits=edits,
            )
        ],
        change_annotations=annotations,
    )


def _applied_message(name: str, rewrite: Rewrite, plan: AcceptPlan) -> str:
    """What the user reads once the rewrite is in: where it went and what was renamed."""
    extra = f" {plan.note}." if plan.note else ""
    renamed = (
        " Renamed to avoid clashes: "
        + ", ".join(f"{a} → {b}" for a, b in plan.renamed.items())
        + "."
        if plan.renamed
        else ""
    )
    where = f"as `{plan.new_name}`" if plan.mode == "alongside" else "in place"
    return (
        f"Kernel Agent: applied the rewrite of `{name}` {where} "
        f"({rewrite.summary}).{extra}{renamed}"
    )
