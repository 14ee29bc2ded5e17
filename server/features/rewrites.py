"""The rewrite commands: accept or reject the rewrite waiting on a target, show it as a
diff, and read it as text (`server.rewrite_actions`, `server.rewrite_diff`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from server import lenses as L
from server.guards import guarded, object_argument
from server.rewrite_actions import accept, pending_rewrites, reject
from server.rewrite_diff import show_diff

if TYPE_CHECKING:
    from server.language_server import KernelAgentServer


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
