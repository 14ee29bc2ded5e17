"""What a catalogued rule is: its name, its law, its side conditions and its egglog body,
and the group a rule module registers its rules into. A module of its own so the rule
modules and the assembly in rules.py both import it and neither imports the other."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from egglog import RewriteOrRule, Ruleset, ruleset

REDUCERS = ("sum", "mean", "amax", "amin", "logsumexp")


@dataclass(frozen=True)
class RuleSpec:
    name: str
    law: str  # the identity, as the hover and the plan say it
    needs: str  # side conditions, "" when none
    body: Callable[..., Iterable[RewriteOrRule]]

    def ruleset(self) -> Ruleset:
        """This rule alone (tests run one rule at a time)."""
        return _alone(self)


class RuleGroup(list[RuleSpec]):
    """The rules of one rule module, in registration order; rules.py concatenates the groups
    into the catalogue, so the order is written down in one place."""

    def law(
        self, name: str, law: str, needs: str = ""
    ) -> Callable[[Callable[..., Iterable]], None]:
        """Register the decorated egglog rule body under `name`."""

        def register(body: Callable[..., Iterable[RewriteOrRule]]) -> None:
            self.append(RuleSpec(name, law, needs, body))

        return register


@functools.cache
def _alone(spec: RuleSpec) -> Ruleset:
    rules = ruleset(name=f"rule:{spec.name}")
    rules.register(spec.body)
    return rules
