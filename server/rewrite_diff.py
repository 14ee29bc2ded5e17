"""Show diff: a waiting rewrite as the editor can show it.

A client that declared `experimental.kernelAgent.rewriteUri` (`server.client_features`)
gets window/showDocument with a URI of the `kernel-agent-rewrite` scheme and resolves it
itself (the VS Code extension opens a side-by-side diff whose two sides it reads through
`kernelAgent.pendingRewrite`):

    kernel-agent-rewrite:/<stem> (<target>, <label>)<ext>?<query>

- the path is only a label: the diff's tab title, whose extension picks the language
  (`<label>` is `current` for the original side, `rewrite` for the rewritten one);
- the query, once percent-decoded like any URI component, is form-encoded
  (`application/x-www-form-urlencoded`) with `uri` (the document's URI), `target` (the
  target's name) and `side`: `original` (the document now) or `rewritten` (the document as
  accepting the rewrite would leave it). The server sends the `rewritten` side.

`editor-extension/src/rewriteUri.ts` builds and reads the same URIs. Every other client
(Neovim, Emacs, Helix...) gets a unified diff file in a temporary folder removed at
shutdown, opened with showDocument where the client can, else named in a message: no
client has to parse that path.
"""

from __future__ import annotations

import asyncio
import difflib
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from lsprotocol import types
from pygls.uris import from_fs_path

from agents.targets.edits import Rewrite
from server.locations import fs_path
from server.rewrite_actions import preview

if TYPE_CHECKING:
    from server.language_server import KernelAgentServer

SCHEME = "kernel-agent-rewrite"


def rewrite_uri(uri: str, target: str, side: str = "rewritten") -> str:
    """The `kernel-agent-rewrite:` URI of one side of `target`'s diff in document `uri`."""
    name = Path(fs_path(uri) or uri.rsplit("/", 1)[-1] or "document.py").name
    stem, dot, ext = name.rpartition(".")
    stem, ext = (stem, dot + ext) if stem else (name, ".py")
    label = "current" if side == "original" else "rewrite"
    query = urlencode({"uri": uri, "target": target, "side": side})
    return f"{SCHEME}:{quote(f'/{stem} ({target}, {label}){ext}')}?{quote(query, safe='')}"


async def show_diff(ls: KernelAgentServer, value: dict[str, Any]) -> dict[str, Any]:
    """The waiting rewrite shown as a diff: by URI where the client resolves
    `kernel-agent-rewrite:`, else as a unified diff file."""
    uri, name = value["uri"], value["target"]
    rewrite = ls.state.pending.get((uri, name))
    if rewrite is None:
        ls.tell(f"Kernel Agent: no rewrite of `{name}` is waiting.", types.MessageType.Info)
        return {"shown": False}
    if ls.state.client.rewrite_uris:
        target_uri = rewrite_uri(uri, name)
        if await _show(ls, target_uri):
            return {"shown": True, "uri": target_uri}
    path = ls.diff_dir() / f"{Path(fs_path(uri) or 'document.py').stem}.{name}.diff"
    await asyncio.to_thread(path.write_text, diff_text(ls, uri, name, rewrite), "utf-8")
    file_uri = from_fs_path(str(path)) or path.as_uri()
    if not ls.state.client.show_document or not await _show(ls, file_uri):
        ls.tell(f"Kernel Agent: the diff is in {path}")
    return {"shown": True, "uri": file_uri, "path": str(path)}


async def _show(ls: KernelAgentServer, uri: str) -> bool:
    """window/showDocument; False (and a log line) when the client could not."""
    try:
        result = await ls.window_show_document_async(
            types.ShowDocumentParams(uri=uri, take_focus=True)
        )
    except Exception as error:
        ls.log_line(f"showDocument failed: {error}", types.MessageType.Warning)
        return False
    return result is None or bool(getattr(result, "success", True))


def diff_text(ls: KernelAgentServer, uri: str, name: str, rewrite: Rewrite) -> str:
    """The rewrite as a unified diff with a header that says what it is."""
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
    return header + note + diff
