"""Evaluation pool: many candidates judged at once, measurements kept clean.

Why: the search (and the editor's server) want many candidates judged in parallel, but two
timings sharing a device disturb each other. So the pool has two lanes:

* BUILD (parallel, `PoolSettings.build_slots`, default max(1, cores - 1)): imports,
  load_inline compiles, torch.compile warm-ups and the correctness trials;
* MEASURE (exclusive per device: one for the CPU machine-wide within the pool, one per GPU).

How the split is made: `evaluate` runs the protocol in the parent (agents/verify/judge.py)
and asks its `MeasureGate` for the device right before timing; the pool grants it only once
the device's lane is free, frees the job's build slot at that moment, and takes the lane back
the moment the timing ends or a worker dies or times out. The timing is driven by the parent,
so no candidate can skip the wait. Waiting for the lane does not count against any deadline.

Backends, behind the same `EvalService` interface:
* `local` (local.py): sandboxed children on this machine; on a multi-GPU host one lane per GPU,
  each child pinned with CUDA_VISIBLE_DEVICES.
* `ray` (ray_pool.py, the `kernel-agent[ray]` extra): each candidate is a Ray build/check task
  and then a measure task that holds a whole GPU, or a node's `kernel_agent_cpu_timer`
  resource, so Ray's scheduler keeps timings apart across every client of the cluster.
"""

from agents.evalpool.backends import make_pool
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
)

__all__ = [
    "BACKENDS",
    "EVENT_KINDS",
    "EvalEvent",
    "EvalService",
    "EventCallback",
    "LocalPool",
    "PoolSettings",
    "PoolSetupError",
    "default_build_slots",
    "make_pool",
    "pin_env",
]
