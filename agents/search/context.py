"""What one search run shares with the steps that serve it: its collaborators (roles, pool,
memory, meter), who it is (task id, signature), its event sink, its stop decision and its
state.

The beam (`Search`, agents/search/beam.py) owns one `SearchRun`; set-up, planning, judging,
the records, memory's lessons, recall and `finish` take the run instead of the `Search`, so
none of them imports the beam and the beam imports them all.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import replace

from agents.evalpool import EvalService, LocalPool, PoolSettings
from agents.evaluate import EvalOptions
from agents.llm.accounting import CostMeter
from agents.llm.base import BudgetExhaustedError
from agents.profile.report import Profile
from agents.roles.base import SkillBrief
from agents.search import events as ev
from agents.search.budget import Budget, BudgetTracker, CancelToken
from agents.search.knowledge import PlanHistory
from agents.search.nodes import Node, Roles, Sample, SearchConfig, SearchMemory, SearchState
from agents.task import SourceFile
from memory.experiences import TaskSignature
from memory.logbook import task_id_for
from memory.normalize import source_hash

log = logging.getLogger("kernel_agent.search")


class SearchRun:
    """One optimisation of one task, as the search's steps see it."""

    def __init__(
        self,
        reference: SourceFile,
        roles: Roles,
        meter: CostMeter,
        *,
        options: EvalOptions,
        config: SearchConfig,
        budget: Budget,
        memory: SearchMemory,
        on_event: Callable[[ev.SearchEvent], None] | None,
        cancel: CancelToken,
        task_name: str,
        pool: EvalService | None,
    ) -> None:
        self.reference = reference
        self.roles = roles
        self.meter = meter
        # Agents require drop-in replacements: Model's state_dict must load as it is.
        self.options = replace(options, require_state_dict=True)
        self.config = config
        # Builds overlap up to parallel_evals; timings on one device never do.
        self.pool = pool or LocalPool(PoolSettings(build_slots=config.parallel_evals))
        self.tracker = BudgetTracker(budget, meter)
        self.memory = memory
        self.on_event = on_event or (lambda event: None)
        self.cancel = cancel
        self.task_name = task_name or reference.label
        self.task_id = task_id_for(reference.text, options.device)
        self.device_name = options.device
        self.signature = TaskSignature(device_name=options.device)
        self.profiles: dict[str, Profile | None] = {}  # source hash -> profile (None: failed)
        self.allowed: list[SkillBrief] = []
        self.forbidden: list[SkillBrief] = []
        self.root_profiled = False
        self.history = PlanHistory()
        self.branch_samples: dict[int, list[Sample]] = {}  # id(child) -> its branch's samples
        self.stop_reason = ""
        self.plans_failed_before = 0  # plans the logbook held as failed when the run began
        self.state = SearchState(best=Node(source=reference.text, speedup=1.0), beam=[])

    def emit(self, event: ev.SearchEvent) -> None:
        try:
            self.on_event(event)
        except Exception:  # a broken progress display must not end the search
            log.exception("event handler failed on %s", event.kind)

    def should_stop(self, calls: bool = True) -> bool:
        """Cancelled or over a cap; `calls=False` for work that makes no model call (judging
        a candidate already written), which only the evaluation and time caps stop."""
        if self.cancel.cancelled:
            self.stop_reason = self.cancel.stop_reason()
            return True
        reason = self.tracker.exhausted(calls=calls)
        if reason:
            self.stop_reason = reason
            return True
        return False

    def llm_failed(self, error: Exception) -> None:
        """Count a failed call; each distinct failure is logged once (one line, not one per
        call). A call the budget refused is not a failure: `should_stop` reports it."""
        if isinstance(error, BudgetExhaustedError):
            return
        state = self.state
        state.llm_failures += 1
        if str(error) != state.last_llm_error:
            log.warning("model call failed: %s", error)
        state.last_llm_error = str(error)

    def seed_for(self, key: str) -> int:
        """The init seed (Model's weights, init arguments) depends on the search's seed and
        the code, not on which concurrent sample finished first, so a seeded run builds every
        candidate's model alike; trial inputs are fresh every verdict (agents/verify/judge.py)."""
        digest = hashlib.sha256(f"{self.config.seed}:{key}".encode()).digest()
        return int.from_bytes(digest[:4], "big") % (2**31 - 10_000)

    @property
    def reference_profile(self) -> Profile | None:
        return self.profiles.get(source_hash(self.reference.text))
