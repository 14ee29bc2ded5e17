"""One speedup, said one way: the editor's lens, hover, notification and status bar, and the
docstring a rewrite leaves in the user's file, all write a speedup through these."""

from __future__ import annotations


def speedup_text(speedup: float) -> str:
    """The one format of a speedup in the editor: two decimals and "x" ("8.35x")."""
    return f"{speedup:.2f}x"


def speedup_summary(speedup: float, confirmed: bool = True) -> str:
    """A finished job's figure as every view says it: "8.35x faster, verified" (", not
    re-measured" when a cancel skipped the confirmation). The status bar parses this."""
    state = "verified" if confirmed else "verified, not re-measured"
    return f"{speedup_text(speedup)} faster, {state}"
