"""The rewrite rules: small, local identities, each with its side conditions and its law.

Every rule is an equality of real-number algebra that also holds in floating point, or holds
up to the rounding of a reordered sum (the verifier's float64 rule judges every result); none
names an op of one problem. Side conditions read the analyses (agents/offline/egraph/
analysis.py): sizes known by construction, and bounds that hold for finite inputs.

This module only assembles: each rule module keeps its rules in a `RuleGroup`
(catalogue.py) and `CATALOGUE` concatenates them; each rule has its own ruleset, so a test
can run one rule alone and an explanation can name the rules that fired.
"""

from __future__ import annotations

import functools

from egglog import Ruleset, ruleset

from agents.offline.egraph import (
    rules_fold,
    rules_identity,
    rules_linear,
    rules_reduce,
    rules_simplify,
)
from agents.offline.egraph.catalogue import REDUCERS, RuleSpec

__all__ = ["CATALOGUE", "REDUCERS", "RuleSpec", "all_rules", "by_name"]

CATALOGUE: list[RuleSpec] = [
    *rules_simplify.RULES,
    *rules_fold.RULES,
    *rules_identity.RULES,
    *rules_linear.RULES,
    *rules_reduce.RULES,
]
"""Every rule, in the order the e-graph registers them."""


@functools.cache
def all_rules() -> Ruleset:
    """Every rule of the catalogue in one ruleset (one registration: combining a ruleset per
    rule makes egglog rebuild its declarations recursively, for minutes)."""
    rules = ruleset(name="algebra")
    for spec in CATALOGUE:
        rules.register(spec.body)
    return rules


def by_name() -> dict[str, RuleSpec]:
    return {spec.name: spec for spec in CATALOGUE}
