"""A verified rewrite waiting on a target: accept it (a versioned workspace edit, refused
when the target changed since the search started), reject it, or show it as a diff. Both
decisions are written to the optimisation memory."""

from __future__ import annotations

import asyncio
import difflib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.uris import from_fs_path

from agents.targets.edits import EditRefused, Rewrite, apply_changes, build_accept
from server import lenses as L
from server.features.guards import guarded, object_argument
from server.features.locations import fs_path, read_disk, text_edit_range
from server.feedback import record_decision

if TYPE_CHECKING:
    from server.app import KernelAgentServer

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
    lines = text.split("\n")
    encoding = ls.encoding
    client = ls.state.client
    edits: list[types.TextEdit | types.AnnotatedTextEdit] = []
    for change in plan.changes:
        r = text_edit_range(lines, change, encoding)
        if client.annotations and client.document_changes:
            edits.append(
                types.AnnotatedTextEdit(range=r, new_text=change.text, annotation_id=ANNOTATION_ID)
            )
        else:
            edits.append(types.TextEdit(range=r, new_text=change.text))
    label = f"Kernel Agent: {plan.mode} `{name}` ({rewrite.summary})"
    if client.document_changes:
        edit = types.WorkspaceEdit(
            document_changes=[
                types.TextDocumentEdit(
                    text_document=types.OptionalVersionedTextDocumentIdentifier(
                        uri=uri, version=doc.version if doc is not None else None
                    ),
                    edits=edits,
                )
            ],
            change_annotations=(
                {
                    ANNOTATION_ID: types.ChangeAnnotation(
                        label=label,
                        needs_confirmation=True,
                        description="A verified, faster rewrite of the kernel",
                    )
                }
                if client.annotations
                else None
            ),
        )
    else:
        edit = types.WorkspaceEdit(changes={uri: edits})
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
    extra = f" {plan.note}." if plan.note else ""
    renamed = (
        " Renamed to avoid clashes: "
        + ", ".join(f"{a} → {b}" for a, b in plan.renamed.items())
        + "."
        if plan.renamed
        else ""
    )
    where = f"as `{plan.new_name}`" if plan.mode == "alongside" else "in place"
    ls.tell(
        f"Kernel Agent: applied the rewrite of `{name}` {where} "
        f"({rewrite.summary}).{extra}{renamed}"
    )
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


async def show_diff(ls: KernelAgentServer, value: dict[str, Any]) -> dict[str, Any]:
    """The waiting rewrite as a unified diff file, opened in the editor where it can."""
    uri, name = value["uri"], value["target"]
    rewrite = ls.state.pending.get((uri, name))
    if rewrite is None:
        ls.tell(f"Kernel Agent: no rewrite of `{name}` is waiting.", types.MessageType.Info)
        return {"shown": False}
    text, new_text, plan, refusal = preview(ls, uri, rewrite)
    note = (
        f"# {refusal}\n# This diff is against the code as it was when the search started.\n"
        if refusal
        else ""
    )
    label = Path(fs_path(uri) or "document.py").name
    diff = "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile=f"a/{label}",
            tofile=f"b/{label} (kernel-agent: {rewrite.summary})",
        )
    )
    header = (
        f"# Kernel Agent: rewrite of `{name}` ({plan.mode}): {rewrite.summary} on "
        f"{rewrite.device}" + (f" ({', '.join(rewrite.methods)})" if rewrite.methods else "") + "\n"
    ) + (f"# The search's {rewrite.candidates}\n" if rewrite.candidates else "")
    path = ls.diff_dir() / f"{Path(label).stem}.{name}.diff"
    await asyncio.to_thread(path.write_text, header + note + diff, "utf-8")
    file_uri = from_fs_path(str(path)) or path.as_uri()
    if ls.state.client.show_document:
        try:
            await ls.window_show_document_async(
                types.ShowDocumentParams(uri=file_uri, take_focus=True)
            )
        except Exception as error:
            ls.log_line(f"showDocument failed: {error}", types.MessageType.Warning)
            ls.tell(f"Kernel Agent: the diff is in {path}")
    else:
        ls.tell(f"Kernel Agent: the diff is in {path}")
    return {"shown": True, "uri": file_uri, "path": str(path)}


def register(ls: KernelAgentServer) -> None:
    @ls.command(L.CMD_ACCEPT)
    @guarded(ls, "accept")
    async def accept_command(*args: Any) -> dict[str, Any]:
        return await accept(ls, object_argument(args, "uri", "target"))

    @ls.command(L.CMD_REJECT)
    @guarded(ls, "reject")
    async def reject_command(*args: Any) -> dict[str, Any]:
        return await reject(ls, object_argument(args, "uri", "target"))

    @ls.command(L.CMD_DIFF)
    @guarded(ls, "show diff")
    async def show_diff_command(*args: Any) -> dict[str, Any]:
        return await show_diff(ls, object_argument(args, "uri", "target"))

    @ls.command(L.CMD_PENDING)
    @guarded(ls, "pending rewrite")
    async def pending_command(*args: Any) -> dict[str, Any]:
        return pending_rewrites(ls, object_argument(args, "uri"))
