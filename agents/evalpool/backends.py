"""Which backend a pool setting names, built on demand (Ray is imported only when asked for).

Why a module of its own: the backends import the interface in `service`, so the choice
between them lives above both, and no backend module imports its siblings.
"""

from __future__ import annotations

from agents.evalpool.service import (
    BACKENDS,
    EvalService,
    EventCallback,
    PoolSettings,
    PoolSetupError,
)


def make_pool(
    settings: PoolSettings | None = None, on_event: EventCallback | None = None
) -> EvalService:
    """The backend `settings` names."""
    settings = settings or PoolSettings()
    if settings.backend == "local":
        from agents.evalpool.local import LocalPool

        return LocalPool(settings, on_event)
    if settings.backend == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise PoolSetupError(
                "the ray backend needs Ray: pip install 'kernel-agent[ray]'"
            ) from None
        from agents.evalpool.ray_pool import RayPool

        return RayPool(settings, on_event)
    raise PoolSetupError(
        f"unknown evaluation backend {settings.backend!r}: use one of {', '.join(BACKENDS)}"
    )
