"""`optimize(request)`: the one way a search is assembled and run.

The CLI, the language server's worker, `bench --optimize` and bench/self_improvement.py
all build an `OptimizeRequest` and come here, so the same request searches alike from
every door. `open_search` is the same thing in two steps, for a caller that also wants what
the search holds (the reference's profile, the memory's recovery note, the roles).

Errors: RequestError, RoleSetupError, MissingAPIKeyError and EvalError mean the request
cannot run (one line: a usage error); MemoryStoreError, the memory file is unusable;
LLMError, a model call failed for good while searching.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from agents.evalpool.backends import make_pool
from agents.evalpool.service import EvalService, PoolSettings, PoolSetupError
from agents.evaluate import EvalOptions
from agents.llm.accounting import CostMeter
from agents.llm.base import ChatModel
from agents.llm.pricing import unpriced_note
from agents.profile.report import Profile
from agents.request.defaults import EVAL_BACKENDS
from agents.request.requests import OptimizeRequest
from agents.request.settings import EvaluationSettings, RequestError
from agents.roles.factory import OfflineSetup, build_roles
from agents.search.beam import Roles, Search, SearchConfig, SearchMemory, run_search
from agents.search.budget import Budget, CancelToken, Deadline
from agents.search.events import SearchEvent
from agents.search.result import SearchResult
from memory.experiences import ExperienceStore
from memory.logbook import Logbook
from memory.store import MemoryStore

EventSink = Callable[[SearchEvent], None]


@dataclass
class OpenSearch:
    """A search ready to run, with what it holds open until `close`."""

    request: OptimizeRequest
    search: Search
    roles: Roles
    models: list[ChatModel]
    store: MemoryStore | None
    owns_pool: bool = True  # False: the caller's pool, which the caller closes

    @property
    def profile(self) -> Profile | None:
        """The reference's profile, once the search has made it."""
        return self.search.reference_profile

    @property
    def memory_note(self) -> str | None:
        """Why the memory file was set aside and started afresh, if it was."""
        return self.store.recovered_from if self.store is not None else None

    def run(self) -> SearchResult:
        """Run the search to its end (a cancel ends it early, keeping the best so far)."""
        return asyncio.run(self.run_async())

    async def run_async(self) -> SearchResult:
        try:
            with self.deadline():
                return await run_search(self.search)
        finally:
            for model in self.models:
                await model.aclose()

    def deadline(self) -> Deadline:
        """--max-time as a promise: when it is spent, whatever is in flight (a build, a
        correctness run, a timing) is cancelled and its workers killed, and the search ends
        with the best kernel verified so far. Counted from when the search was assembled."""
        limit = self.request.budget.max_time
        left = None if limit is None else limit - self.search.context.tracker.elapsed_s()
        reason = f"time budget spent ({limit:g} s, --max-time)" if limit else ""
        return Deadline(self.search.cancel, left, reason)

    def close(self) -> None:
        """The evaluation pool (a local Ray it started stops here), then the memory store."""
        try:
            if self.owns_pool:
                self.search.pool.close()
        finally:
            if self.store is not None:
                self.store.close()


def optimize(
    request: OptimizeRequest,
    on_event: EventSink | None = None,
    cancel: CancelToken | threading.Event | None = None,
    *,
    pool: EvalService | None = None,
) -> SearchResult:
    """Search for a faster verified kernel for `request.target`; see the module's errors.
    `pool`: one the caller keeps open over many searches (a benchmark's), else one opened
    from `request.evaluation` and closed here."""
    with open_search(request, on_event, cancel, pool=pool) as job:
        return job.run()


@contextmanager
def open_search(
    request: OptimizeRequest,
    on_event: EventSink | None = None,
    cancel: CancelToken | threading.Event | None = None,
    *,
    pool: EvalService | None = None,
) -> Iterator[OpenSearch]:
    """The search for `request`, closed (its own pool, memory) when the block ends."""
    job = _assemble(request.resolved(), on_event, _token(cancel), pool)
    try:
        yield job
    finally:
        job.close()


def _token(cancel: CancelToken | threading.Event | None) -> CancelToken:
    """One CancelToken whose event is the caller's, so setting either stops the search."""
    if isinstance(cancel, CancelToken):
        return cancel
    token = CancelToken()
    if cancel is not None:
        token.event = cancel
    return token


def eval_options(request: OptimizeRequest) -> EvalOptions:
    """How each candidate of the search is judged."""
    evaluation = request.evaluation
    if evaluation.timing_budget <= 0:
        raise RequestError("--timing-budget must be positive")
    size = evaluation.size
    if size == "fit":  # a door that did not resolve it (the CLI does, and names the sizes)
        from agents.sizing.api import resolve_size

        problem = request.target.problem
        size = resolve_size(problem, size, device=evaluation.device, use_jail=evaluation.jail).size
    return EvalOptions(
        device=evaluation.device,
        size=size,
        threads=evaluation.threads,
        timing_budget_s=evaluation.timing_budget,
        jail=evaluation.jail,
    )


def search_config(request: OptimizeRequest) -> tuple[SearchConfig, Budget]:
    """The search's shape and budget (after `request.resolved()`); RequestError if bad."""
    search, budget = request.search, request.budget
    try:
        config = SearchConfig(
            beam=search.beam,
            plans=search.plans,
            samples=search.samples,
            iterations=search.iterations,
            patience=search.patience,
            repairs=search.repairs,
            parallel_evals=request.evaluation.parallel_evals,
            profile=search.profile,
            seed=request.seed,
        )
        limits = Budget(
            max_evals=budget.max_evals,
            max_tokens=budget.max_tokens,
            max_cost_usd=budget.max_cost,
            max_wall_s=budget.max_time,
        )
    except (TypeError, ValueError) as error:
        raise RequestError(str(error)) from None
    return config, limits


def _assemble(
    request: OptimizeRequest,
    on_event: EventSink | None,
    cancel: CancelToken,
    pool: EvalService | None,
) -> OpenSearch:
    config, budget = search_config(request)
    options = eval_options(request)
    target = request.target
    store = MemoryStore(request.memory.path) if request.memory.enabled else None
    memory = SearchMemory()
    if store is not None:
        memory = SearchMemory(experiences=ExperienceStore(store), logbook=Logbook(store))
    meter = CostMeter()
    models: list[ChatModel] = []
    try:
        roles, models = build_roles(
            request.llm,
            meter,
            device=options.device,
            offline=OfflineSetup(target.problem, options, memory.experiences, cancel.event),
        )
        if request.budget.max_cost is not None:
            _check_priced(models)
        owns_pool = pool is None
        if pool is None:  # last: a local Ray is started only for a search that runs
            pool = _open_pool(request)
    except BaseException:
        _close_now(models)
        if store is not None:
            store.close()
        raise
    search = Search(
        target.problem,
        roles,
        meter,
        options=options,
        config=config,
        budget=budget,
        memory=memory,
        on_event=on_event,
        cancel=cancel,
        task_name=target.name,
        pool=pool,
    )
    return OpenSearch(request, search, roles, models, store, owns_pool)


def _check_priced(models: list[ChatModel]) -> None:
    """--max-cost is held before each call by the model's price: refuse a model without
    one rather than let the cap silently count it as free."""
    for model in models:
        if getattr(model, "priced", True) is False:
            name = model.label.split(":", 1)[-1]
            raise RequestError(
                f"--max-cost cannot be held: {unpriced_note(name)}, or cap --max-tokens instead"
            )


def _close_now(models: list[ChatModel]) -> None:
    """Close chat models that never ran (a search refused before it started), from a plain
    caller (the CLI) or from inside an event loop (the server's worker) alike."""

    async def close_all() -> None:
        for model in models:
            await model.aclose()

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop here: run one
        asyncio.run(close_all())
        return
    closer = threading.Thread(target=asyncio.run, args=(close_all(),), name="close-models")
    closer.start()
    closer.join()


def pool_settings(evaluation: EvaluationSettings) -> PoolSettings:
    """Where candidates are built and timed; RequestError for a contradiction."""
    if evaluation.eval_backend not in EVAL_BACKENDS:
        raise RequestError(
            f"unknown evaluation backend {evaluation.eval_backend!r}: use one of "
            f"{', '.join(EVAL_BACKENDS)}"
        )
    if evaluation.ray_address and evaluation.eval_backend != "ray":
        raise RequestError("--ray-address needs --eval-backend ray")
    return PoolSettings(
        backend=evaluation.eval_backend,
        build_slots=evaluation.parallel_evals,
        ray_address=evaluation.ray_address,
    )


def _open_pool(request: OptimizeRequest) -> EvalService:
    try:
        return make_pool(pool_settings(request.evaluation))
    except PoolSetupError as error:
        raise RequestError(str(error)) from None
