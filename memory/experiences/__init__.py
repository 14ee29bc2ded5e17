"""AccelOpt's optimization memory, persisted and shared across tasks.

An experience is a pair of kernels (slow -> fast), the measured speedup and what the
summarizer learnt from it. The package is split by job, and this module names what the rest
of the code uses:

- `lessons`: what an experience and a task signature are, and when an attempt becomes one;
- `storage`: `ExperienceStore`, the rows in the shared SQLite store;
- `retrieval` (with `text_index`): which entries are most similar to a task;
- `export`: the JSON file that moves a memory between machines.
"""

from memory.experiences.export import MemoryFileError, read_export
from memory.experiences.lessons import (
    FEEDBACK,
    TARGETS,
    Experience,
    Kind,
    MemoryPolicy,
    TaskSignature,
    from_attempt,
)
from memory.experiences.storage import ExperienceStore

__all__ = [
    "FEEDBACK",
    "TARGETS",
    "Experience",
    "ExperienceStore",
    "Kind",
    "MemoryFileError",
    "MemoryPolicy",
    "TaskSignature",
    "from_attempt",
    "read_export",
]
