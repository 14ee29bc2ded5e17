"""What the client says it can do, read once at initialize: every feature asks here before
it sends a request the client might not understand.

Two of them are Kernel Agent's own, declared under the client's experimental capabilities
(`{"experimental": {"kernelAgent": {"jobsChanged": true, "rewriteUri": true}}}`; the VS Code
extension declares both): `jobsChanged`, the client handles the `kernelAgent/jobsChanged`
notification (`server.running_jobs`), and `rewriteUri`, it opens `kernel-agent-rewrite:` URIs
in window/showDocument (`server.rewrite_diff`). Other clients get neither: no notification
they would not know, and a unified diff file for Show diff."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lsprotocol import types


@dataclass
class ClientFeatures:
    """What the client says it can do; read once at initialize."""

    progress: bool = False
    lens_refresh: bool = False
    pull_diagnostics: bool = False
    annotations: bool = False
    document_changes: bool = False
    message_actions: bool = False
    show_document: bool = False
    configuration: bool = False
    dynamic_configuration: bool = False
    resolve_properties: frozenset[str] = frozenset()
    action_literals: bool = False
    disabled_actions: bool = False
    icons: bool = False
    jobs_changed: bool = False
    rewrite_uris: bool = False
    name: str = "unknown client"

    @classmethod
    def of(cls, caps: types.ClientCapabilities, info: types.ClientInfo | None) -> ClientFeatures:
        window, workspace, text = caps.window, caps.workspace, caps.text_document
        edit = workspace.workspace_edit if workspace else None
        action = text.code_action if text else None
        resolve = action.resolve_support if action else None
        name = info.name if info else "unknown client"
        return cls(
            progress=bool(window and window.work_done_progress),
            lens_refresh=bool(
                workspace and workspace.code_lens and workspace.code_lens.refresh_support
            ),
            pull_diagnostics=bool(
                text
                and text.diagnostic is not None
                and workspace
                and workspace.diagnostics
                and workspace.diagnostics.refresh_support
            ),
            annotations=bool(edit and edit.change_annotation_support is not None),
            document_changes=bool(edit and edit.document_changes),
            message_actions=bool(
                window
                and window.show_message
                and window.show_message.message_action_item is not None
            ),
            show_document=bool(window and window.show_document and window.show_document.support),
            configuration=bool(workspace and workspace.configuration),
            dynamic_configuration=bool(
                workspace
                and workspace.did_change_configuration
                and workspace.did_change_configuration.dynamic_registration
            ),
            resolve_properties=frozenset(resolve.properties if resolve else ()),
            action_literals=bool(action and action.code_action_literal_support),
            disabled_actions=bool(action and action.disabled_support),
            icons="code" in name.lower() or "visual studio" in name.lower(),
            jobs_changed=_own(caps.experimental, "jobsChanged"),
            rewrite_uris=_own(caps.experimental, "rewriteUri"),
            name=name,
        )


def _own(experimental: Any, name: str) -> bool:
    """Whether the client declared `experimental.kernelAgent.<name>: true`."""
    ours = experimental.get("kernelAgent") if isinstance(experimental, dict) else None
    return isinstance(ours, dict) and ours.get(name) is True
