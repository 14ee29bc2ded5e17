"""Every default of a request, in one place: the CLI's flags, the editor's empty settings and
the config file all fall back to these, so a terminal run and an editor run search alike."""

from __future__ import annotations

from memory.devices import DEVICES

__all__ = [
    "BENCH_MAX_EVALS",
    "DEVICES",
    "EVAL_BACKENDS",
    "EVAL_TIMING_BUDGET_S",
    "LLM_SEARCH",
    "MAX_EVALS",
    "MIN_TRIALS",
    "OFFLINE_SEARCH",
    "PROFILE_REPEAT",
    "SEARCH_TIMING_BUDGET_S",
    "SELF_IMPROVEMENT_TIMING_BUDGET_S",
    "search_shape",
]

LLM_SEARCH = {"beam": 6, "plans": 12, "samples": 2, "iterations": 16, "patience": 4, "repairs": 2}
"""AccelOpt's B=6 N=12 K=2 T=16, plus two repair attempts: the search shape with an LLM."""
OFFLINE_SEARCH = {"beam": 3, "plans": 6, "samples": 1, "iterations": 6, "patience": 2, "repairs": 0}
"""Passes are deterministic (one sample is enough) and few (six plans cover them)."""

SEARCH_TIMING_BUDGET_S = 2.0
"""Longest timing of one candidate during a search: many are timed, the best again at the end."""
EVAL_TIMING_BUDGET_S = 3.0
"""Longest timing of a single verdict (`eval`, `bench`): one pair, so it may take longer."""
SELF_IMPROVEMENT_TIMING_BUDGET_S = 1.0
"""bench/self_improvement.py times two whole passes of the suite; only evaluation counts matter."""

EVAL_BACKENDS = ("local", "ray")
"""Where candidates are built and timed: this machine, or a Ray cluster."""

MAX_EVALS = 100
"""Evaluations per search at most, unless the request says otherwise."""
BENCH_MAX_EVALS = 40
"""Evaluations per problem in `bench --optimize` and bench/self_improvement.py."""
MIN_TRIALS = 5
"""KernelBench's current number of correctness trials; we never run fewer."""
PROFILE_REPEAT = 5
"""Profiled forwards per `profile` run."""


def search_shape(offline: bool) -> dict[str, int]:
    """The beam, plans, samples, iterations, patience and repairs a search uses by default."""
    return dict(OFFLINE_SEARCH if offline else LLM_SEARCH)
