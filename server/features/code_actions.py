"""Code actions on a target: optimize, profile, show a pending rewrite, and a quick fix that
inserts the template a target still needs. Clients that resolve get the command (or the edit)
only when they resolve the action."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lsprotocol import types

from agents.targets.find import target_at
from server import lenses as L
from server.documents import Document
from server.features.guards import guarded
from server.features.locations import position

if TYPE_CHECKING:
    from server.app import KernelAgentServer

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


def insertion_edit(ls: KernelAgentServer, doc: Document, snippet: str) -> types.WorkspaceEdit:
    """`snippet` appended at the end of `doc`, after the blank lines PEP 8 wants."""
    last = len(doc.lines) - 1
    text = doc.line(last)
    prefix = "\n" * (3 if text.strip() else 2) if doc.text else ""
    end = position(doc, last, len(text), ls.encoding)
    return types.WorkspaceEdit(
        changes={
            doc.uri: [
                types.TextEdit(
                    range=types.Range(start=end, end=end),
                    new_text=prefix + snippet.rstrip("\n"),
                )
            ]
        }
    )


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
        settings = ls.state.settings
        out: list[types.CodeAction] = []
        rewrite_kind = str(ACTION_KIND.value)
        for target in hits[:3]:
            base = {"uri": uri, "target": target.name}
            if (uri, target.name) in ls.state.pending and kind_wanted(rewrite_kind, only):
                rewrite = ls.state.pending[(uri, target.name)]
                data = {**base, "action": "show"}
                out.append(
                    resolvable_action(
                        ls,
                        f"Show pending rewrite of `{target.name}` ({rewrite.summary})",
                        ACTION_KIND,
                        data,
                        command_for(data),
                    )
                )
            if kind_wanted(rewrite_kind, only):
                data = {**base, "action": "optimize", "backend": "offline"}
                item = resolvable_action(
                    ls,
                    f"Optimize {target.label} `{target.name}`",
                    ACTION_KIND,
                    data,
                    command_for(data),
                )
                if not target.ready and ls.state.client.disabled_actions:
                    item.disabled = types.CodeActionDisabled(reason=target.missing or "not ready")
                out.append(item)
                if settings.llm_model_label and target.ready:
                    data = {**base, "action": "optimize", "backend": "llm"}
                    out.append(
                        resolvable_action(
                            ls,
                            f"Optimize `{target.name}` with `{settings.llm_model_label}`",
                            ACTION_KIND,
                            data,
                            command_for(data),
                        )
                    )
                if target.ready:
                    data = {**base, "action": "profile"}
                    out.append(
                        resolvable_action(
                            ls,
                            f"Profile {target.label} `{target.name}`",
                            ACTION_KIND,
                            data,
                            command_for(data),
                        )
                    )
            if not target.ready and target.snippet and kind_wanted(str(QUICKFIX_KIND.value), only):
                what = target.snippet.split("(", 1)[0].replace("def ", "")
                data = {**base, "action": "insert", "snippet": target.snippet}
                item = resolvable_action(
                    ls, f"Add {what}() template for `{target.name}`", QUICKFIX_KIND, data, None
                )
                if "edit" not in ls.state.client.resolve_properties:
                    item.edit = insertion_edit(ls, doc, target.snippet)
                out.append(item)
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
                item.edit = insertion_edit(ls, doc, data["snippet"])
            return item
        if item.command is None:
            item.command = command_for(data)
        return item
