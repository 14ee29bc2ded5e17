"""Every candidate's fate: what a search built, how the verifier judged it, and why it was or
was not the kernel offered.

Why: a result that names only the winner's method hides what else was tried, so neither a
user nor we can tell a pass that never applied from one that was slower or drifted out of
the float64 band. The search writes one entry per sample (`FateLog`, filled by
agents/search/records.py as samples are judged and by finish.py at the end); the result
carries them as frozen `CandidateFate`s, which the CLI tables, the bench rows and the
editor's hover all read. Only the standard library and the verdict module are imported: the
language server formats the summary on its event loop.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from agents.verify.verdict import EvalResult, Verdict
from memory.normalize import source_hash

REASON_CHARS = 200


class Fate(StrEnum):
    """Why a candidate was (not) the kernel offered; one per candidate."""

    CHOSEN = "chosen"
    SLOWER = "slower"
    OUT_OF_BAND = "out_of_band"
    INCORRECT = "incorrect"
    FAILED_TO_BUILD = "failed_to_build"
    NOT_APPLIED = "not_applied"
    DUPLICATE = "duplicate"
    CUT_BY_BUDGET = "cut_by_budget"

    @property
    def words(self) -> str:
        return FATE_WORDS[self]


FATE_WORDS = {
    Fate.CHOSEN: "chosen",
    Fate.SLOWER: "slower",
    Fate.OUT_OF_BAND: "out of band",
    Fate.INCORRECT: "incorrect",
    Fate.FAILED_TO_BUILD: "failed to build",
    Fate.NOT_APPLIED: "did not apply",
    Fate.DUPLICATE: "duplicate",
    Fate.CUT_BY_BUDGET: "cut by the budget",
}
"""How each fate reads for a person; the summary lists them in this order."""


@dataclass(frozen=True)
class CandidateFate:
    """One candidate of a search: the plan (pass) that made it, its verdict and numbers, and
    why it was not chosen. Ratios are None where nothing was measured."""

    plan: str  # the plan's title
    method: str  # the pass (offline) or the plan's one method (LLM)
    fate: Fate
    verdict: str  # the verifier's verdict, or "no_code" / "duplicate" / "not_judged"
    reason: str = ""  # one line: the error, the pass's refusal, or how it compared
    iteration: int = 0
    sample: int = 0
    repair: int = 0  # 0: the executor's own attempt; n: its n-th repair
    evaluation: int | None = None  # which evaluation judged it; None: never judged
    error_ratio: float | None = None  # float64 error over the allowed band (<= 1: inside)
    time_ms: float | None = None  # the candidate's median (the confirming run's if chosen)
    reference_ms: float | None = None  # the reference's median in the same run
    vs_reference: float | None = None  # speedup over the reference
    vs_best: float | None = None  # speed over the best verified before it (> 1: a new best)

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "method": self.method,
            "fate": self.fate.value,
            "verdict": self.verdict,
            "reason": self.reason,
            "iteration": self.iteration,
            "sample": self.sample,
            "repair": self.repair,
            "evaluation": self.evaluation,
            "error_ratio": self.error_ratio,
            "time_ms": self.time_ms,
            "reference_ms": self.reference_ms,
            "vs_reference": self.vs_reference,
            "vs_best": self.vs_best,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CandidateFate:
        """The entry as `to_json` wrote it; ValueError/KeyError/TypeError for anything else."""

        def number(key: str) -> float | None:
            value = data.get(key)
            return None if value is None else float(value)

        evaluation = data.get("evaluation")
        return cls(
            plan=str(data["plan"]),
            method=str(data["method"]),
            fate=Fate(data["fate"]),
            verdict=str(data["verdict"]),
            reason=str(data.get("reason", "")),
            iteration=int(data.get("iteration", 0)),
            sample=int(data.get("sample", 0)),
            repair=int(data.get("repair", 0)),
            evaluation=None if evaluation is None else int(evaluation),
            error_ratio=number("error_ratio"),
            time_ms=number("time_ms"),
            reference_ms=number("reference_ms"),
            vs_reference=number("vs_reference"),
            vs_best=number("vs_best"),
        )


def fates_from_json(items: Any) -> tuple[CandidateFate, ...]:
    """Saved entries back as fates; an entry that cannot be read is left out (a report from
    before fates were kept has none)."""
    out = []
    for item in items if isinstance(items, list | tuple) else ():
        try:
            out.append(CandidateFate.from_json(item))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return tuple(out)


def fates_summary(fates: Iterable[CandidateFate]) -> str:
    """ "7 candidates: 1 chosen, 3 slower, 2 out of band, 1 failed to build" ("" for none):
    the one line the hover, the pending rewrite and the bench tables show."""
    counts = Counter(f.fate for f in fates)
    total = sum(counts.values())
    if not total:
        return ""
    noun = "candidate" if total == 1 else "candidates"
    parts = [f"{counts[fate]} {fate.words}" for fate in Fate if counts[fate]]
    return f"{total} {noun}: " + ", ".join(parts)


def demote_chosen(fates: Iterable[CandidateFate], reason: str) -> tuple[CandidateFate, ...]:
    """The same fates with the chosen one marked slower (a baseline the caller offers instead
    was faster), so a row never names two winners."""
    return tuple(
        replace(f, fate=Fate.SLOWER, reason=reason) if f.fate is Fate.CHOSEN else f for f in fates
    )


def first_line(reasons: Iterable[str]) -> str:
    """The line of an error a person reads first: its first line, or a traceback's last."""
    lines = [line.strip() for text in reasons for line in str(text).splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 1] + "…"


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _ratio(value: float | None) -> float | None:
    value = _finite(value)
    return None if value is None else round(value, 4)


def fate_of_verdict(verdict: str) -> Fate:
    """A sample's fate from its verdict alone, before its report is read: correct ones are
    "slower" until the search names the one it offers; a sample with no code did not apply."""
    return {
        "correct": Fate.SLOWER,
        "duplicate": Fate.DUPLICATE,
        "no_code": Fate.NOT_APPLIED,
        "incorrect": Fate.INCORRECT,
        "rejected": Fate.INCORRECT,
    }.get(verdict, Fate.FAILED_TO_BUILD)


def failure_fate(result: EvalResult) -> tuple[Fate, str]:
    """A judged candidate that was not correct: its fate and the one line that says why.
    Wrong but finite outputs whose error against float64 exceeds the band are "out of band";
    NaN/Inf, wrong shapes and refused (cheating) code are "incorrect"; the rest failed to
    build or run."""
    why = first_line(result.reasons)
    if result.verdict is Verdict.INCORRECT:
        ratio = _finite(result.float64_error_ratio)
        nonfinite = any("NaN or Inf" in reason for reason in result.reasons)
        if ratio is not None and ratio > 1.0 and not nonfinite:
            return Fate.OUT_OF_BAND, why
        return Fate.INCORRECT, why
    if result.verdict is Verdict.REJECTED:
        return Fate.INCORRECT, why
    return Fate.FAILED_TO_BUILD, why


@dataclass
class _Entry:
    fate: CandidateFate
    key: str = ""  # source_hash of the judged code ("" when nothing was judged)
    unstable: str = ""  # why its timing could not be told apart from the load, if it could not


@dataclass
class FateLog:
    """The search's running list of candidates; `final` decides chosen and slower once the
    search knows which kernel it offers."""

    entries: list[_Entry] = field(default_factory=list)
    confirmations: dict[str, EvalResult] = field(default_factory=dict)

    def judged(
        self,
        fate: CandidateFate,
        result: EvalResult | None,
        source: str | None,
        best_before: float,
    ) -> None:
        """A sample the verifier judged (`result`), or one it did not (no code, a duplicate:
        `fate` already says which)."""
        key = source_hash(source) if source is not None and result is not None else ""
        if result is not None:
            speedup = _finite(result.speedup) if result.correct else None
            fate = replace(
                fate,
                error_ratio=_finite(result.float64_error_ratio),
                time_ms=_finite(result.candidate_ms),
                reference_ms=_finite(result.reference_ms),
                vs_reference=_ratio(speedup),
                vs_best=_ratio(speedup / best_before) if speedup and best_before > 0 else None,
            )
            if not result.correct:
                kind, why = failure_fate(result)
                fate = replace(fate, fate=kind, reason=why)
            elif not result.timing_stable:  # its ratio is not a number anyone may read as one
                fate = replace(fate, vs_reference=None, vs_best=None)
                unstable = result.timing_unstable_reason or "the load moved it too much"
                self.entries.append(_Entry(fate, key, unstable))
                return
        self.entries.append(_Entry(fate, key))

    def confirmed(self, source: str, result: EvalResult) -> None:
        """The confirming evaluation of a kernel on fresh inputs (offered or not)."""
        self.confirmations[source_hash(source)] = result

    def final(
        self, chosen: str | None, speedup: float, confirmed: bool
    ) -> tuple[CandidateFate, ...]:
        """Every candidate with its fate: the kernel offered (`chosen`, its result's `speedup`
        and, when `confirmed`, the confirming run's times) and why each correct one was not."""
        key = source_hash(chosen) if chosen is not None else ""
        searched = next((e.fate.vs_reference for e in self.entries if key and e.key == key), None)
        out = []
        for entry in self.entries:
            fate = entry.fate
            if fate.verdict == Verdict.CORRECT.value and fate.fate is Fate.SLOWER:
                if key and entry.key == key:
                    fate = self._chosen(fate, speedup, confirmed, key)
                    key = ""  # one chosen, even if the same code was judged twice
                else:
                    kind, why = self._why_not_chosen(entry, searched)
                    fate = replace(fate, fate=kind, reason=why)
            out.append(fate)
        return tuple(out)

    def _chosen(
        self, fate: CandidateFate, speedup: float, confirmed: bool, key: str
    ) -> CandidateFate:
        check = self.confirmations.get(key) if confirmed else None
        if check is None:
            return replace(
                fate, fate=Fate.CHOSEN, vs_reference=speedup, reason="offered; not re-measured"
            )
        searched = f"{fate.vs_reference:.2f}x" if fate.vs_reference else "its search figure"
        rescale = speedup / fate.vs_reference if fate.vs_reference else None
        return replace(
            fate,
            fate=Fate.CHOSEN,
            time_ms=_finite(check.candidate_ms),
            reference_ms=_finite(check.reference_ms),
            error_ratio=_finite(check.float64_error_ratio),
            vs_reference=speedup,
            vs_best=_ratio(fate.vs_best * rescale) if fate.vs_best and rescale else fate.vs_best,
            reason=f"offered: re-measured on fresh inputs (the search measured {searched})",
        )

    def _why_not_chosen(self, entry: _Entry, chosen_speedup: float | None) -> tuple[Fate, str]:
        """A correct candidate that was not offered: slower than the chosen one, no faster
        than the reference, or not confirmed on fresh inputs (where it may even have failed)."""
        mine = entry.fate.vs_reference
        if entry.unstable:
            return Fate.SLOWER, f"its timing was unstable ({entry.unstable}): not a speedup"
        check = self.confirmations.get(entry.key)
        if check is not None:
            if not check.correct:
                kind, why = failure_fate(check)
                return kind, f"on fresh inputs: {why}"
            again = f"{check.speedup:.2f}x" if check.speedup else "no faster"
            return Fate.SLOWER, (
                f"{mine or 0:.2f}x in the search, {again} on fresh inputs: not beyond the noise"
            )
        if chosen_speedup and mine is not None:
            return Fate.SLOWER, (
                f"{mine:.2f}x against the chosen kernel's {chosen_speedup:.2f}x (in the search)"
            )
        if mine is not None and mine <= 1.0:
            return Fate.SLOWER, f"no faster than the reference ({mine:.2f}x)"
        return Fate.SLOWER, "not re-measured: the faster candidates tried first were not confirmed"
