"""Evaluation pool: many candidates judged at once, measurements kept clean.

Why: the search (and the editor's server) want many candidates judged in parallel, but two
timings sharing a device disturb each other. So the pool has two lanes:

* BUILD (parallel, `PoolSettings.build_slots`, default max(1, cores - 1)): imports,
  load_inline compiles, torch.compile warm-ups and the correctness trials;
* MEASURE (exclusive per device: one for the CPU machine-wide within the pool, one per GPU).

How the split is made without a second harness: the reviewer announces a `measure` phase
right before timing and blocks on a gate pipe until the parent lets it go
(`agents.sandbox.channel` / `agents.sandbox.process.MeasureGate`). The pool grants that gate
only once the device's lane is free, and frees the job's build slot at that moment; the lane
is released when the child is gone. One child per candidate, no correctness work repeated.
Limits: the child is the candidate's own process, so a hostile candidate could skip the wait;
it cannot forge a verdict by doing so, and the static checker rejects touching the harness.
Waiting for the lane does not count against the run wall clock.

Backends, behind the same `EvalService` interface:
* `local` (local.py): sandboxed children on this machine; on a multi-GPU host one lane per GPU,
  each child pinned with CUDA_VISIBLE_DEVICES.
* `ray` (ray_pool.py, the `kernel-agent[ray]` extra): each candidate is a Ray build/check task
  and then a measure task that holds a whole GPU, or a node's `kernel_agent_cpu_timer`
  resource, so Ray's scheduler keeps timings apart across every client of the cluster.
"""

from agents.evalpool.arguments import PoolArgumentError, add_pool_arguments, pool_settings
from agents.evalpool.local import LocalPool, pin_env
from agents.evalpool.service import (
    BACKENDS,
    EVENT_KINDS,
    EvalEvent,
    EvalService,
    EventCallback,
    PoolSettings,
    PoolSetupError,
    default_build_slots,
    make_pool,
)

__all__ = [
    "BACKENDS",
    "EVENT_KINDS",
    "EvalEvent",
    "EvalService",
    "EventCallback",
    "LocalPool",
    "PoolArgumentError",
    "PoolSettings",
    "PoolSetupError",
    "add_pool_arguments",
    "default_build_slots",
    "make_pool",
    "pin_env",
    "pool_settings",
]
