"""Code actions on a target: optimize, profile, show a pending rewrite, and a quick fix that
inserts the template a target still needs. Clients that resolve get the command (or the edit)
only when they resolve the action."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lsprotocol import types

from agents.targets.find import target_at
from agents.targets.model import Target
from server import lenses as L
from server.documents import Document
from server.guards import guarded
from server.locations import insertion_edit

if TYPE_CHECKING:
    from server.language_server import KernelAgentServer

ACTION_KIND = types.CodeActionKind.RefactorRewrite
QUICKFIX_KIND = types.CodeActionKind.QuickFix


def kind_wanted(kind: str, only: list[str] | None) -> bool:
    """Whether the client's `only` filter lets an action of `kind` through."""
    return not only or any(kind == o or kind.startswith(o + ".") for o in only)


def resolvable_action(
    ls: KernelAgentServer,
    title: str,
    kind: str,
    data: dict[str, Any],
    command: types.Command | None,
) -> types.CodeAction:
    """A code action whose command waits for codeAction/resolve where the client resolves it."""
    resolvable = "command" in ls.state.client.resolve_properties
    return types.CodeAction(
        title=title,
        kind=kind,
        data=data,
        command=None if resolvable else command,
    )


def command_for(data: dict[str, Any]) -> types.Command | None:
    """The command an action's data stands for (None for an edit-only action)."""
    args = {"uri": data["uri"], "target": data["target"]}
    name = data.get("action")
    if name == "optimize":
        return types.Command(
            title="Optimize",
            command=L.CMD_OPTIMIZE,
            arguments=[{**args, "backend": data.get("backend", "offline")}],
        )
    if name == "profile":
        return types.Command(title="Profile", command=L.CMD_PROFILE, arguments=[args])
    if name == "show":
        return types.Command(title="Show diff", command=L.CMD_DIFF, arguments=[args])
    return None


def actions_for(
    ls: KernelAgentServer, doc: Document, target: Target, only: list[str]
) -> list[types.CodeAction]:
    """The actions on one target that the client's `only` filter lets through."""
    out: list[types.CodeAction] = []
    if kind_wanted(str(ACTION_KIND.value), only):
        out.extend(_rewrite_actions(ls, doc.uri, target))
    if not target.ready and target.snippet and kind_wanted(str(QUICKFIX_KIND.value), only):
        what = target.snippet.split("(", 1)[0].replace("def ", "")
        data = {
            "uri": doc.uri,
            "target": target.name,
            "action": "insert",
            "snippet": target.snippet,
        }
        item = resolvable_action(
            ls, f"Add {what}() template for `{target.name}`", QUICKFIX_KIND, data, None
        )
        if "edit" not in ls.state.client.resolve_properties:
            item.edit = insertion_edit(doc, target.snippet, ls.encoding)
        out.append(item)
    return out


def _rewrite_actions(ls: KernelAgentServer, uri: str, target: Target) -> list[types.CodeAction]:
    """Show pending rewrite, Optimize (offline, and with the LLM when one is set), Profile."""
    base = {"uri": uri, "target": target.name}

    def action(title: str, **data: str) -> types.CodeAction:
        full = {**base, **data}
        return resolvable_action(ls, title, ACTION_KIND, full, command_for(full))

    out: list[types.CodeAction] = []
    rewrite = ls.state.pending.get((uri, target.name))
    if rewrite is not None:
        out.append(
            action(f"Show pending rewrite of `{target.name}` ({rewrite.summary})", action="show")
        )
    item = action(f"Optimize {target.label} `{target.name}`", action="optimize", backend="offline")
    if not target.ready and ls.state.client.disabled_actions:
        item.disabled = types.CodeActionDisabled(reason=target.missing or "not ready")
    out.append(item)
    model = ls.state.settings.llm_model_label
    if model and target.ready:
        out.append(
            action(f"Optimize `{target.name}` with `{model}`", action="optimize", backend="llm")
        )
    if target.ready:
        out.append(action(f"Profile {target.label} `{target.name}`", action="profile"))
    return out


def register(ls: KernelAgentServer) -> None:
    @ls.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(
            resolve_provider=True, code_action_kinds=[ACTION_KIND, QUICKFIX_KIND]
        ),
    )
    @guarded(ls, "code actions")
    def code_action(params: types.CodeActionParams):
        uri = params.text_document.uri
        doc = ls.docs.get(uri)
        if doc is None:
            return None
        only = [str(getattr(k, "value", k)) for k in (params.context.only or [])]
        first, last = params.range.start.line, params.range.end.line
        targets = ls.parsed(doc).targets
        hits = [t for t in targets if any(t.covers(line) for line in range(first, last + 1))]
        if not hits:
            hit = target_at(targets, first)
            hits = [hit] if hit else []
        out = [a for t in hits[:3] for a in actions_for(ls, doc, t, only)]
        if not ls.state.client.action_literals:
            return [a.command for a in out if a.command is not None] or None
        return out or None

    @ls.feature(types.CODE_ACTION_RESOLVE)
    @guarded(ls, "code action resolve")
    def code_action_resolve(item: types.CodeAction) -> types.CodeAction:
        data = item.data if isinstance(item.data, dict) else None
        if (
            not data
            or not isinstance(data.get("uri"), str)
            or not isinstance(data.get("target"), str)
        ):
            return item
        if data.get("action") == "insert":
            doc = ls.docs.get(data["uri"])
            if doc is not None and isinstance(data.get("snippet"), str) and item.edit is None:
                item.edit = insertion_edit(doc, data["snippet"], ls.encoding)
            return item
        if item.command is None:
            item.command = command_for(data)
        return item
