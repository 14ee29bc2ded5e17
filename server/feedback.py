"""The user's verdict on a rewrite, written to the optimisation memory.

An accepted rewrite makes the lessons that produced it rank first among equals when the
planner next retrieves similar kernels; a rejected one makes them rank last.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    accepted: bool
    lessons: int  # how many memory entries now carry the verdict
    error: str | None = None

    @property
    def summary(self) -> str:
        verdict = "accepted" if self.accepted else "rejected"
        if self.error:
            return f"could not record the {verdict} rewrite in memory: {self.error}"
        if not self.lessons:
            return f"{verdict}; no lesson in memory came from this rewrite"
        return f"{verdict}; marked {self.lessons} lesson(s) in memory"


def record_decision(
    rewrite_source: str, accepted: bool, memory_path: str | None, enabled: bool = True
) -> Decision:
    """Mark the lessons whose fast kernel is this rewrite (blocking: run off the loop)."""
    if not enabled:
        return Decision(accepted, 0, "memory is turned off (kernelAgent.memory.enabled)")
    from memory.experiences import ExperienceStore  # numpy: not at the server's start-up
    from memory.store import MemoryStore, MemoryStoreError

    try:
        with MemoryStore(memory_path) as store:
            ids = ExperienceStore(store).set_feedback_for_source(rewrite_source, accepted)
    except (MemoryStoreError, OSError) as error:
        return Decision(accepted, 0, " ".join(str(error).split())[:200])
    return Decision(accepted, len(ids))
