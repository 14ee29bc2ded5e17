"""The incremental analysis (server/analysis.py over server/documents.py) equals a fresh
read of the same text after any edits, including edits that leave a syntax error.

tree-sitter's error recovery with an old tree differs from a fresh parse; this found a
document whose typed-in version kept `Model` as a target while the same text opened fresh
did not (make test-all, 2026-12-06). The LSP twin is tests/e2e/test_lsp_incremental.py; this one
drives the analysis directly, so it affords many more random edit scripts."""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agents.targets.analysis import Analysis, Result, full_analysis
from agents.targets.syntax import parse_text
from server.documents import Document
from tests.edit_scripts import BROKEN_CLASS, SEEDS, edit_scripts, position

# BROKEN_CLASS, typed into GEMM, leaves an ERROR tree a fresh parse reads without `Model`.
GEMM = SEEDS[0]


def summary(result: Result) -> tuple[list[str], list[str]]:
    """Every field of every target and hint (both are dataclasses)."""
    return [repr(t) for t in result.targets], [repr(h) for h in result.hints]


@settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(script=edit_scripts(), looks=st.lists(st.booleans(), min_size=8, max_size=8))
@example(script=(GEMM, BROKEN_CLASS), looks=[False] * 8)
@example(script=(GEMM, BROKEN_CLASS), looks=[True] * 8)
def test_edits_analysed_incrementally_match_a_fresh_parse(script, looks) -> None:
    """`looks[i]`: whether the analysis runs after edit i (as a code lens request would),
    so the dirty region it patches spans one edit or several."""
    text, edits = script
    doc = Document("file:///edited.py", text, 1)
    analysis = Analysis()
    analysis.refresh(doc)
    for i, (start, end, new) in enumerate(edits):
        a, b = position(text, start), position(text, end)
        doc.apply((a["line"], a["character"]), (b["line"], b["character"]), new, i + 2)
        text = text[:start] + new + text[end:]
        if looks[i] or i == len(edits) - 1:
            assert doc.text == text
            got = summary(analysis.refresh(doc))
            assert got == summary(full_analysis(parse_text(text))), (i, edits)


def test_a_tree_with_errors_is_the_one_a_fresh_open_builds() -> None:
    text = GEMM
    doc = Document("file:///edited.py", text, 1)
    for i, (start, end, new) in enumerate(BROKEN_CLASS):
        a, b = position(text, start), position(text, end)
        doc.apply((a["line"], a["character"]), (b["line"], b["character"]), new, i + 2)
        text = text[:start] + new + text[end:]
    assert doc.root.has_error
    assert str(doc.root) == str(parse_text(text).root_node)
