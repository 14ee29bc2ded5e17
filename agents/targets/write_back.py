"""The file `kernel-agent optimize FILE.py::NAME` writes for a synthesised target.

The search optimises a `Model` wrapped around NAME, so its result is a `ModelNew` module
around the user's code, not something a user calls in place of NAME. What a user expects is
what the editor's Accept gives (`edits.build_accept`, "alongside"): their own file, unchanged,
with the verified rewrite added after NAME as a drop-in (`NAME_optimized(...)`, same
arguments and result, for a function; `NameNew` for a module class). The command line writes
that to FILE_optimized.py, never over FILE.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agents.request.target import Target
from agents.search.result import SearchResult
from agents.targets.edits import EditRefused, Rewrite, apply_changes, build_accept


@dataclass(frozen=True)
class FileRewrite:
    """What to write, the name a caller uses in it, and (when it is the search's module
    rather than the user's file) why."""

    text: str
    call: str
    note: str = ""


def rewritten_file(target: Target, result: SearchResult) -> FileRewrite:
    """The user's file with `result`'s rewrite added alongside the target (a caller uses
    `manual_softmax_optimized`). For a file's own `Model`, nothing was synthesised: the
    search's module itself (`ModelNew`), as before; so too, with the reason, for a rewrite
    that cannot be placed in the file (a verified kernel is never thrown away)."""
    source = result.source or ""
    if not target.synthesized or target.original is None:
        return FileRewrite(source, "ModelNew")
    rewrite = Rewrite(
        job_id="",
        uri=Path(target.problem.label).absolute().as_uri(),
        target=target.name,
        target_kind=target.kind,
        snapshot=target.original,
        source=source,
        speedup=result.speedup,
        device=result.device,
        confirmed=result.confirmed,
        methods=tuple(result.methods),
        speedup_ci=(result.speedup_ci[0], result.speedup_ci[1]) if result.speedup_ci else None,
    )
    try:
        plan = build_accept(target.original, rewrite, "alongside")
    except EditRefused as error:
        return FileRewrite(source, "ModelNew", f"written as the search's module: {error}")
    return FileRewrite(apply_changes(target.original, plan.changes), plan.call_name)
