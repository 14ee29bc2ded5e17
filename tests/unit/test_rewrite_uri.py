"""The `kernel-agent-rewrite:` URIs the server sends for Show diff (server/rewrite_diff.py):
the strings editor-extension/test/rewriteUri.test.ts reads back, so the server and the
extension cannot drift apart, and a document URI survives them intact."""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from server.rewrite_diff import SCHEME, rewrite_uri

# The same literals as FROM_SERVER and FROM_SERVER_ORIGINAL in rewriteUri.test.ts.
FROM_SERVER = (
    "kernel-agent-rewrite:/13_gemm%20%28Model%2C%20rewrite%29.py?uri%3Dfile%253A%252F%252F%252F"
    "work%252Fmy%252520proj%252F13_gemm.py%26target%3DModel%26side%3Drewritten"
)
FROM_SERVER_ORIGINAL = (
    "kernel-agent-rewrite:/x%20%28fn_1%2C%20current%29.py?uri%3Dfile%253A%252F%252F%252Fwork"
    "%252Fa%252526b%252Fx.py%26target%3Dfn_1%26side%3Doriginal"
)


def test_the_extension_reads_the_same_strings():
    assert rewrite_uri("file:///work/my%20proj/13_gemm.py", "Model") == FROM_SERVER
    assert rewrite_uri("file:///work/a%26b/x.py", "fn_1", "original") == FROM_SERVER_ORIGINAL


@pytest.mark.parametrize(
    "uri",
    ["file:///tmp/gemm.py", "file:///work/my%20proj/a%26b.py", "untitled:Untitled-1"],
)
def test_the_query_carries_the_document_target_and_side(uri):
    parts = urlsplit(rewrite_uri(uri, "Model"))
    assert parts.scheme == SCHEME
    assert parse_qs(unquote(parts.query)) == {
        "uri": [uri],
        "target": ["Model"],
        "side": ["rewritten"],
    }
    assert unquote(parts.path).endswith("(Model, rewrite).py")
