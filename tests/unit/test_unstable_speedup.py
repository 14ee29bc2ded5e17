"""An unstable timing (agents/verify/stability.py) is shown as "unstable" and never offered,
ranked or counted as a speedup: the eval summary, the search's choice, the bench row."""

from __future__ import annotations

import json

from agents.bench.render import markdown_report
from agents.bench.report import BenchReport, BenchRow
from agents.cli.evaluate import format_summary
from agents.search.finish import faster, ranked_speedup
from agents.verify.verdict import EvalResult, Verdict

REASON = "the machine was busy: the two halves of the run measured 0.60x and 2.10x"


def timed(speedup: float, stable: bool, ci: tuple[float, float] = (2.0, 2.6)) -> EvalResult:
    return EvalResult(
        Verdict.CORRECT,
        reference_ms=2.0,
        candidate_ms=2.0 / speedup,
        speedup=speedup,
        speedup_ci=list(ci),
        timing_runs=20,
        timing_method="cpu: timed from outside",
        timing_stable=stable,
        timing_unstable_reason="" if stable else REASON,
    )


def test_the_eval_summary_shows_unstable_instead_of_a_number():
    shown = format_summary(timed(2.3, stable=False))
    assert f"speedup: unstable ({REASON})" in shown
    assert "2.30x" not in shown
    assert "speedup 2.30x [95% CI 2.00-2.60]" in format_summary(timed(2.3, stable=True))


def test_the_json_report_carries_the_stability():
    data = json.loads(json.dumps(timed(2.3, stable=False).to_json()))
    assert data["timing_stable"] is False and data["timing_unstable_reason"] == REASON
    assert EvalResult(Verdict.CORRECT).to_json()["timing_stable"] is True


def test_the_search_never_offers_or_ranks_an_unstable_speedup():
    unstable, stable = timed(2.3, stable=False), timed(2.3, stable=True)
    assert not faster(unstable) and faster(stable)
    assert ranked_speedup(unstable) == 1.0 and ranked_speedup(stable) == 2.3
    assert ranked_speedup(timed(0.5, stable=False, ci=(0.4, 0.6))) == 0.5
    assert unstable.trusted_speedup is None and stable.trusted_speedup == 2.3
    assert ranked_speedup(EvalResult(Verdict.INCORRECT, speedup=3.0)) is None


def _row(problem: str, speedup: float, stable: bool) -> BenchRow:
    return BenchRow(
        problem=problem,
        path=f"{problem}.py",
        baseline="torch.compile",
        verdict="correct",
        strict_allclose=True,
        float64_rule=True,
        eager_ms=1.0,
        baseline_ms=1.0 / speedup,
        speedup=speedup,
        speedup_ci=[speedup * 0.9, speedup * 1.1],
        reasons=[],
        elapsed_s=1.0,
        timing_stable=stable,
        unstable_reason="" if stable else REASON,
    )


def test_the_bench_shows_an_unstable_row_and_counts_it_only_as_correct():
    report = BenchReport(
        date="2026-12-07",
        machine="test",
        device="cpu",
        size="default",
        command="bench",
        rows=[_row("steady", 1.5, True), _row("busy", 3.0, False)],
    )
    assert report.fast_p(0.0, "float64") == 1.0  # both correct
    assert report.fast_p(1.0, "float64") == 0.5  # the unstable 3.0x is no speedup
    assert report.geomean_speedup("float64") == 1.5
    table = markdown_report(report)
    busy = next(line for line in table.splitlines() if line.startswith("| busy"))
    assert "unstable" in busy and "3.00x" not in busy
    again = BenchReport.from_json(json.loads(json.dumps(report.to_json())))
    assert [row.timing_stable for row in again.rows] == [True, False]
