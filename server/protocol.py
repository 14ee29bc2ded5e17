"""The JSON-RPC side of the server: pygls' protocol with what it lacks.

- A request whose params do not fit its type is answered with InvalidParams (pygls drops it
  unanswered, and the client waits forever).
- Every handler's future leaves `_request_futures` when it is done (pygls kept those of
  commands and async notifications for good: about 7.7 MB per 1,000 failed commands).
- The open documents are `server.documents`' alone: pygls' own copy rebuilt the whole text
  line by line in Python on every incremental change (tens of ms in a 5 MB file).
- Shutdown cancels pending requests without tripping over their removal.
- Replies built outside pygls (refused frames, batches) go out through `send_payload`.
"""

from __future__ import annotations

from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method


class _Answered:
    """A request already answered with an error: `handle_message` ignores it."""

    jsonrpc = "answered"


class KernelAgentProtocol(LanguageServerProtocol):
    """pygls' LSP protocol, answering what it drops and freeing what it keeps (see above)."""

    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException as error:
            if not (isinstance(data, dict) and "id" in data and "method" in data):
                raise
            cause = " ".join(str(error.__cause__ or error).split())[:300]
            reply = JsonRpcInvalidParams(message=f"invalid params for {data['method']}: {cause}")
            self._send_response(data["id"], error=reply.to_response_error())
            return _Answered()

    def _execute_handler(self, msg_id, handler, callback, args=None, kwargs=None):
        """pygls keeps the future of every async handler in `_request_futures` (for
        $/cancelRequest) but removes only a request's own: the handler a builtin feature
        yields to (workspace/executeCommand's command, didOpen's...) and every async
        notification run under a fresh uuid and stayed there for good, with the error and
        traceback of each failed command. Drop each one when it is done."""

        def release(future) -> None:
            try:
                callback(future)
            finally:
                if self._request_futures.get(msg_id) is future:
                    del self._request_futures[msg_id]

        super()._execute_handler(msg_id, handler, release, args, kwargs)

    @lsp_method(types.SHUTDOWN)
    def lsp_shutdown(self, *args):
        """pygls' shutdown, cancelling the pending requests from a copy of their table: a
        cancelled future's callbacks remove it from the table at once."""
        if (handler := self.fm.features.get(types.SHUTDOWN)) is not None:
            yield handler, args, None
        current_id = self.msg_id
        for msg_id, future in list(self._request_futures.items()):
            if msg_id != current_id and not future.done():
                future.cancel()
        self._shutdown = True

    # The document notifications go straight to the server's handlers (server.documents).
    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_OPEN)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CLOSE)) is not None:
            yield handler, (params,), None

    def send_payload(self, payload: Any) -> None:
        """A reply built outside pygls (a frame or batch it never saw), framed as usual."""
        self._send_data(payload)
