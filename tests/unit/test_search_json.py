"""SearchEvent and SearchResult read back what they wrote: the editor's worker sends them
across a pipe, and a saved trajectory is read again. NaN and infinities travel as null (the
worker's rule) and read back as NaN; a wrong value is one clear error naming its field."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.search import events as ev
from agents.search.fates import CandidateFate, Fate
from agents.search.result import SearchResult, TrajectoryPoint
from agents.search.typed_json import JSONShapeError, finite

NAMES = st.text(max_size=20)
COUNTS = st.integers(min_value=0, max_value=10_000)
SPEEDS = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)

EVENTS = st.one_of(
    st.builds(
        ev.Started,
        task=NAMES,
        device=NAMES,
        planner=NAMES,
        executor=NAMES,
        beam=COUNTS,
        plans=COUNTS,
        samples=COUNTS,
        iterations=COUNTS,
    ),
    st.builds(
        ev.Profiled,
        summary=NAMES,
        hot_lines=st.lists(st.fixed_dictionaries({"line": COUNTS, "share": SPEEDS}), max_size=3),
    ),
    st.builds(
        ev.IterationStarted,
        iteration=COUNTS,
        iterations=COUNTS,
        beam_speedups=st.lists(SPEEDS, max_size=4),
        best_speedup=SPEEDS,
        evaluations=COUNTS,
    ),
    st.builds(ev.PlanMade, iteration=COUNTS, parent=COUNTS, title=NAMES, method=NAMES),
    st.builds(ev.PhaseStarted, phase=NAMES),
    st.builds(
        ev.CandidateEvaluated,
        iteration=COUNTS,
        plan=NAMES,
        sample=COUNTS,
        repair=COUNTS,
        verdict=NAMES,
        speedup=st.none() | SPEEDS,
        evaluations=COUNTS,
        reason=NAMES,
    ),
    st.builds(ev.NewBest, iteration=COUNTS, speedup=SPEEDS, plan=NAMES, evaluations=COUNTS),
    st.builds(
        ev.Finished,
        verdict=NAMES,
        speedup=SPEEDS,
        improved=st.booleans(),
        evaluations=COUNTS,
        stopped_because=NAMES,
        cost_usd=SPEEDS,
        tokens=COUNTS,
    ),
    st.builds(ev.Failed, reason=NAMES),
)


def wire(data: dict) -> dict:
    """What the worker's pipe carries: strict JSON with NaN and infinities as null."""
    return json.loads(json.dumps(finite(data), allow_nan=False))


@settings(max_examples=200, deadline=None)
@given(EVENTS)
def test_every_event_reads_back_equal_after_the_wire(event):
    back = ev.SearchEvent.from_json(wire(event.to_json()))
    assert type(back) is type(event) and back == event


def test_every_event_kind_is_readable():
    assert set(ev.EVENT_KINDS) == {
        "started",
        "profiled",
        "iteration",
        "phase",
        "plan",
        "candidate",
        "new_best",
        "finished",
        "failed",
    }


def test_a_nan_or_infinite_speedup_travels_as_null_and_reads_back_as_nan():
    event = ev.NewBest(iteration=1, speedup=math.inf, plan="p", evaluations=2)
    data = wire(event.to_json())
    assert data["speedup"] is None
    assert math.isnan(ev.SearchEvent.from_json(data).speedup)
    iteration = ev.IterationStarted(1, 3, [math.nan, 2.0], math.nan, 4)
    back = ev.SearchEvent.from_json(wire(iteration.to_json()))
    assert math.isnan(back.beam_speedups[0]) and back.beam_speedups[1] == 2.0
    # an optional speedup keeps null as "not measured"
    candidate = ev.CandidateEvaluated(1, "p", 0, 0, "incorrect", None, 1)
    assert ev.SearchEvent.from_json(wire(candidate.to_json())).speedup is None


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"kind": "teleported"}, "teleported"),
        ({"iteration": 1}, "kind None"),
        ([1, 2], "object"),
        ({"kind": "new_best", "iteration": 1, "plan": "p", "evaluations": 2}, "speedup"),
        (
            {"kind": "plan", "iteration": "one", "parent": 0, "title": "t", "method": "m"},
            "iteration",
        ),
        (
            {
                "kind": "finished",
                "verdict": "correct",
                "speedup": 1.0,
                "improved": "yes",
                "evaluations": 1,
                "stopped_because": "",
                "cost_usd": 0.0,
                "tokens": 0,
            },
            "improved",
        ),
    ],
)
def test_a_garbled_event_is_one_clear_error(data, named):
    with pytest.raises(JSONShapeError) as error:
        ev.SearchEvent.from_json(data)
    assert named in str(error.value) and "\n" not in str(error.value)


POINTS = st.builds(
    TrajectoryPoint,
    evaluation=COUNTS,
    iteration=COUNTS,
    plan=NAMES,
    method=NAMES,
    sample=COUNTS,
    repair=COUNTS,
    verdict=NAMES,
    speedup=st.none() | SPEEDS,
    best_speedup=SPEEDS,
    elapsed_s=SPEEDS,
    reason=NAMES,
)
FATES = st.builds(
    CandidateFate,
    plan=NAMES,
    method=NAMES,
    fate=st.sampled_from(list(Fate)),
    verdict=NAMES,
    reason=NAMES,
    iteration=COUNTS,
    sample=COUNTS,
    repair=COUNTS,
    evaluation=st.none() | COUNTS,
    error_ratio=st.none() | SPEEDS,
    time_ms=st.none() | SPEEDS,
    reference_ms=st.none() | SPEEDS,
    vs_reference=st.none() | SPEEDS,
    vs_best=st.none() | SPEEDS,
)
REPORTS = st.none() | st.fixed_dictionaries(
    {"verdict": NAMES, "speedup": SPEEDS, "nested": st.fixed_dictionaries({"runs": COUNTS})}
)
RESULTS = st.builds(
    SearchResult,
    task=NAMES,
    device=NAMES,
    improved=st.booleans(),
    verdict=NAMES,
    speedup=SPEEDS,
    speedup_ci=st.none() | st.lists(SPEEDS, min_size=2, max_size=2),
    confirmed=st.booleans(),
    source=st.none() | NAMES,
    methods=st.lists(NAMES, max_size=3),
    evaluations=COUNTS,
    iterations=COUNTS,
    stopped_because=NAMES,
    elapsed_s=SPEEDS,
    cost=st.fixed_dictionaries({"tokens": COUNTS, "cost_usd": SPEEDS}),
    planner=NAMES,
    executor=NAMES,
    trajectory=st.lists(POINTS, max_size=4),
    eval_report=REPORTS,
    notes=st.lists(NAMES, max_size=2),
    memory=st.fixed_dictionaries({"path": NAMES}),
    candidates=st.lists(FATES, max_size=4).map(tuple),
)


@settings(max_examples=150, deadline=None)
@given(RESULTS)
def test_a_result_reads_back_equal_with_its_trajectory_candidates_and_report(result):
    back = SearchResult.from_json(wire(result.to_json()))
    assert back == result


def test_a_result_with_nan_numbers_reads_back_with_nan():
    result = SearchResult(
        "t",
        "cpu",
        False,
        "no_improvement",
        math.nan,
        [math.inf, 2.0],
        False,
        None,
        [],
        0,
        0,
        "cancelled",
        1.0,
        {},
        "offline",
        "offline",
        trajectory=[TrajectoryPoint(1, 1, "p", "m", 0, 0, "incorrect", None, math.nan, 0.5)],
    )
    back = SearchResult.from_json(wire(result.to_json()))
    assert math.isnan(back.speedup) and math.isnan(back.speedup_ci[0])
    assert back.trajectory[0].speedup is None and math.isnan(back.trajectory[0].best_speedup)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"speedup": "fast"}, "result.speedup"),
        ({"methods": "fuse"}, "result.methods"),
        ({"trajectory": [{"evaluation": 1}]}, "trajectory point has no iteration"),
        ({"improved": None}, "result.improved"),
    ],
)
def test_a_garbled_result_is_one_clear_error(change, named):
    data = SearchResult(
        "t",
        "cpu",
        False,
        "no_improvement",
        1.0,
        None,
        True,
        None,
        [],
        0,
        0,
        "budget",
        1.0,
        {},
        "offline",
        "offline",
    ).to_json()
    with pytest.raises(JSONShapeError, match=named):
        SearchResult.from_json({**data, **change})
    with pytest.raises(JSONShapeError, match="has no task"):
        SearchResult.from_json({k: v for k, v in data.items() if k != "task"})
