"""Every candidate's fate (issue 31): the record round-trips through JSON exactly, the
search's log classifies each verdict (out of the float64 band, incorrect, failed to build,
did not apply, cut by the budget) and names the one chosen with the result's own figures,
and the summary the editor shows counts them in words."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from agents.search.fates import (
    CandidateFate,
    Fate,
    FateLog,
    demote_chosen,
    failure_fate,
    fate_of_verdict,
    fates_from_json,
    fates_summary,
)
from agents.search.fates_table import COLUMNS, fates_table, fates_title
from agents.search.result import SearchResult, TrajectoryPoint
from agents.verify.verdict import EvalResult, Verdict

numbers = st.none() | st.floats(allow_nan=False, allow_infinity=False)
counts = st.integers(min_value=0, max_value=10**6)
fates = st.builds(
    CandidateFate,
    plan=st.text(),
    method=st.text(),
    fate=st.sampled_from(Fate),
    verdict=st.text(),
    reason=st.text(),
    iteration=counts,
    sample=counts,
    repair=counts,
    evaluation=st.none() | counts,
    error_ratio=numbers,
    time_ms=numbers,
    reference_ms=numbers,
    vs_reference=numbers,
    vs_best=numbers,
)
points = st.builds(
    TrajectoryPoint,
    evaluation=counts,
    iteration=counts,
    plan=st.text(),
    method=st.text(),
    sample=counts,
    repair=counts,
    verdict=st.text(),
    speedup=numbers,
    best_speedup=st.floats(allow_nan=False, allow_infinity=False),
    elapsed_s=st.floats(allow_nan=False, allow_infinity=False),
    reason=st.text(),
)


def _through_json(data: dict) -> dict:
    return json.loads(json.dumps(data))


@given(fates)
def test_a_fate_round_trips_through_json_exactly(fate):
    again = CandidateFate.from_json(_through_json(fate.to_json()))
    assert again == fate
    assert type(again.fate) is Fate and again.to_json() == fate.to_json()


@given(st.lists(fates, max_size=5), st.lists(points, max_size=3), st.booleans())
def test_a_search_result_reads_back_equal_from_its_json(candidates, trajectory, improved):
    result = SearchResult(
        task="t",
        device="cpu",
        improved=improved,
        verdict="correct" if improved else "no_improvement",
        speedup=2.5 if improved else 1.0,
        speedup_ci=[2.1, 2.9] if improved else None,
        confirmed=improved,
        source="class ModelNew: ..." if improved else None,
        methods=["equality-saturation"] if improved else [],
        evaluations=len(candidates),
        iterations=1,
        stopped_because="ran all 1 iterations",
        elapsed_s=3.0,
        cost={"tokens": 0, "cost_usd": 0.0},
        planner="offline",
        executor="offline",
        trajectory=trajectory,
        eval_report={"candidate_ms": 1.5} if improved else None,
        notes=["a note"],
        memory={"task_id": "abc"},
        candidates=tuple(candidates),
    )
    data = _through_json(result.to_json())
    assert [CandidateFate.from_json(c) for c in data["candidates"]] == candidates
    assert SearchResult.from_json(data) == result


def test_unreadable_saved_entries_are_left_out():
    good = CandidateFate("p", "m", Fate.SLOWER, "correct").to_json()
    assert fates_from_json([good, {"plan": "x"}, "junk", {**good, "fate": "won"}]) == (
        CandidateFate.from_json(good),
    )
    assert fates_from_json(None) == ()


def _judge(log: FateLog, plan: str, result: EvalResult | None, *, source=None, verdict=None):
    verdict = verdict or result.verdict.value
    fate = CandidateFate(plan, plan, fate_of_verdict(verdict), verdict, reason=f"{plan}: none")
    best = max([1.0] + [e.fate.vs_reference or 0.0 for e in log.entries])
    log.judged(fate, result, source, best_before=best)


def _correct(candidate_ms: float, reference_ms: float = 15.0) -> EvalResult:
    return EvalResult(
        Verdict.CORRECT,
        float64_error_ratio=0.25,
        candidate_ms=candidate_ms,
        reference_ms=reference_ms,
        speedup=reference_ms / candidate_ms,
    )


def _search_log() -> FateLog:
    """One candidate of every kind, judged in this order."""
    log = FateLog()
    _judge(log, "p-none", None, verdict="no_code")
    _judge(log, "p-slow", _correct(10.0), source="slow")
    _judge(log, "p-fast", _correct(5.0), source="fast")
    drift = "call 1, output 0: max |diff| 0.1 fails allclose, and its error against float64 is 4.2x"
    _judge(
        log,
        "p-drift",
        EvalResult(Verdict.INCORRECT, [drift], float64_error_ratio=4.2),
        source="drift",
    )
    nan = "call 1, output 0: NaN or Inf where the reference is finite"
    _judge(log, "p-nan", EvalResult(Verdict.INCORRECT, [nan]), source="nan")
    crash = 'Traceback (most recent call last):\n  File "c.py", line 3\nSyntaxError: bad'
    _judge(log, "p-build", EvalResult(Verdict.COMPILE_ERROR, [crash]), source="build")
    _judge(log, "p-cheat", EvalResult(Verdict.REJECTED, ["reads the reference's output"]))
    _judge(log, "p-twin", None, verdict="duplicate")
    log.judged(
        CandidateFate("p-cut", "p-cut", Fate.CUT_BY_BUDGET, "not_judged", "evaluation budget"),
        None,
        None,
        best_before=3.0,
    )
    return log


def test_the_log_names_each_candidates_fate_and_the_chosen_ones_figures():
    log = _search_log()
    log.confirmed("fast", _correct(4.8))
    final = {f.plan: f for f in log.final("fast", round(15.0 / 4.8, 4), confirmed=True)}
    assert [f.fate for f in final.values()] == [
        Fate.NOT_APPLIED,
        Fate.SLOWER,
        Fate.CHOSEN,
        Fate.OUT_OF_BAND,
        Fate.INCORRECT,
        Fate.FAILED_TO_BUILD,
        Fate.INCORRECT,
        Fate.DUPLICATE,
        Fate.CUT_BY_BUDGET,
    ]
    chosen = final["p-fast"]  # the confirming run's time and the result's speedup
    assert chosen.time_ms == 4.8 and chosen.vs_reference == 3.125 and chosen.evaluation is None
    assert chosen.vs_best == round(2.0 * 3.125 / 3.0, 4)  # 2x the best before it, rescaled
    assert "the search measured 3.00x" in chosen.reason
    slower = final["p-slow"]
    assert slower.time_ms == 10.0 and slower.vs_reference == 1.5 and slower.vs_best == 1.5
    assert slower.reason == "1.50x against the chosen kernel's 3.00x (in the search)"
    assert final["p-drift"].error_ratio == 4.2 and "fails allclose" in final["p-drift"].reason
    assert final["p-build"].reason == "SyntaxError: bad"  # a traceback's telling line
    assert final["p-none"].reason == "p-none: none" and final["p-cut"].time_ms is None
    summary = fates_summary(final.values())
    assert summary == (
        "9 candidates: 1 chosen, 1 slower, 1 out of band, 2 incorrect, 1 failed to build, "
        "1 did not apply, 1 duplicate, 1 cut by the budget"
    )


def test_without_an_offered_kernel_each_correct_candidate_says_why():
    log = _search_log()
    log.confirmed("fast", _correct(14.9))  # not faster on fresh inputs
    final = {f.plan: f for f in log.final(None, 1.0, confirmed=False)}
    assert Fate.CHOSEN not in {f.fate for f in final.values()}
    assert (
        final["p-fast"].reason == "3.00x in the search, 1.01x on fresh inputs: not beyond the noise"
    )
    assert final["p-slow"].reason.startswith("not re-measured")
    broken = _search_log()  # correct in the search, wrong on the fresh inputs
    nan = "call 2, output 0: NaN or Inf where the reference is finite"
    broken.confirmed("fast", EvalResult(Verdict.INCORRECT, [nan]))
    fast = next(f for f in broken.final(None, 1.0, confirmed=False) if f.plan == "p-fast")
    assert fast.fate is Fate.INCORRECT and fast.reason == f"on fresh inputs: {nan}"
    cancelled = FateLog()
    _judge(cancelled, "p-only", _correct(5.0), source="only")
    (only,) = cancelled.final("only", 3.0, confirmed=False)
    assert only.fate is Fate.CHOSEN and only.reason == "offered; not re-measured"


def test_an_unstable_timing_is_never_shown_as_a_speedup():
    log = FateLog()
    _judge(log, "p-steady", _correct(10.0), source="steady")
    why = "the machine was busy: the two halves of the run measured 0.6x and 2.1x"
    shaky = replace(_correct(2.0), timing_stable=False, timing_unstable_reason=why)
    _judge(log, "p-shaky", shaky, source="shaky")
    assert log.entries[1].fate.vs_reference is None and log.entries[1].fate.vs_best is None
    final = {f.plan: f for f in log.final("steady", 1.5, confirmed=False)}
    assert final["p-steady"].fate is Fate.CHOSEN
    shown = final["p-shaky"]
    assert shown.fate is Fate.SLOWER and shown.vs_reference is None
    assert shown.reason == f"its timing was unstable ({why}): not a speedup"


def test_the_summary_counts_in_words_with_plurals():
    one = CandidateFate("p", "m", Fate.CHOSEN, "correct")
    assert fates_summary([one]) == "1 candidate: 1 chosen"
    assert fates_summary([]) == ""
    mixed = [
        one,
        *[CandidateFate("p", "m", Fate.SLOWER, "correct")] * 3,
        *[CandidateFate("p", "m", Fate.OUT_OF_BAND, "incorrect")] * 2,
        CandidateFate("p", "m", Fate.FAILED_TO_BUILD, "compile_error"),
    ]
    assert fates_summary(mixed) == (
        "7 candidates: 1 chosen, 3 slower, 2 out of band, 1 failed to build"
    )
    demoted = demote_chosen(mixed, "torch.compile was faster")
    assert fates_summary(demoted) == "7 candidates: 4 slower, 2 out of band, 1 failed to build"
    assert demoted[0].reason == "torch.compile was faster"


def test_the_table_shows_every_candidate_with_its_figures():
    log = _search_log()
    log.confirmed("fast", _correct(4.8))
    final = log.final("fast", 3.125, confirmed=True)
    console = Console(record=True, width=300)
    console.print(fates_table([("", final)], title=fates_title(final)))
    text = console.export_text()
    assert all(header in text for header in COLUMNS)
    assert text.startswith("9 candidates: 1 chosen")
    chosen_line = next(line for line in text.splitlines() if "p-fast" in line)
    assert "4.800" in chosen_line and "3.12x" in chosen_line and "chosen: offered" in chosen_line
    assert "failed to build: SyntaxError: bad" in text
    assert "did not apply: none" in text  # the pass's own name is not repeated


def test_only_finite_outputs_beyond_the_band_are_out_of_band():
    def fate(result: EvalResult) -> Fate:
        return failure_fate(result)[0]

    drift = ["output 0: max |diff| 0.1 fails allclose, and its error against float64 is 3x"]
    assert fate(EvalResult(Verdict.INCORRECT, drift, float64_error_ratio=3.0)) is Fate.OUT_OF_BAND
    inside = ["a timed run: its output has another structure than during verification"]
    assert fate(EvalResult(Verdict.INCORRECT, inside, float64_error_ratio=0.5)) is Fate.INCORRECT
    nan = ["output 0: NaN or Inf where the reference is finite"]
    assert fate(EvalResult(Verdict.INCORRECT, nan, float64_error_ratio=9.0)) is Fate.INCORRECT
    assert fate(EvalResult(Verdict.TIMEOUT, ["running took longer than 5 s"])) is (
        Fate.FAILED_TO_BUILD
    )


def test_a_long_search_prints_a_short_table_that_keeps_the_chosen_one():
    many = [CandidateFate(f"plan {i}", f"pass-{i}", Fate.SLOWER, "correct") for i in range(30)]
    many[25] = replace(many[25], fate=Fate.CHOSEN)
    console = Console(record=True, width=300)
    console.print(fates_table([("", many)], title=fates_title(many), limit=20))
    text = console.export_text()
    listed = [line for line in text.splitlines() if "pass-" in line]
    assert len(listed) == 20 and "pass-25" in listed[-1] and "pass-18 " in listed[-2]
    assert "… 10 more (--json lists every candidate)" in text
