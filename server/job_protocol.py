"""The messages between the language server's job manager (server/jobs.py) and a job's
worker process (server/worker.py), as frozen dataclasses with `to_json` and `from_json`.

One JSON object per line. The server writes the job (`WorkerJob`: the typed request and the
editor's target) and then commands (`Cancel`) to the worker's stdin; the worker writes
`Setup`, `EventMessage`, `ResultMessage` and `ErrorMessage` to a pipe of its own. NaN and
infinities travel as null (strict JSON for any reader) and read back as NaN. A line that is
not one of these messages is a `ProtocolError`, one line saying what is wrong; the manager
fails the job with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from agents.profile.report import Profile
from agents.request.requests import OptimizeRequest, ProfileRequest
from agents.request.settings import RequestError
from agents.request.wire import from_json as request_from_json
from agents.request.wire import to_json as request_to_json
from agents.search.events import SearchEvent
from agents.search.result import SearchResult
from agents.search.typed_json import JSONShapeError, finite, read_fields

JOB_KINDS = ("optimize", "profile")


class ProtocolError(ValueError):
    """A line that is not a message of this protocol; one line for the user."""


def encode(message: dict[str, Any]) -> str:
    """One message as its line (no newline): strict JSON, NaN and infinities as null."""
    return json.dumps(finite(message), allow_nan=False)


def _object(line: bytes | str) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
        raise ProtocolError(f"not JSON: {text[:80]!r}") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"not a JSON object: {str(data)[:80]!r}")
    return data


# -- the job ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerJob:
    """What a worker runs: an optimisation or a profile, as the typed request the CLI would
    build, and the editor's target it answers for. No secrets: keys are in the environment."""

    request: OptimizeRequest | ProfileRequest
    target: str  # the class or function name in the user's file
    target_kind: str  # "module" | "function" | "triton" | "cuda"
    synthesized: bool  # the problem was built around the user's code, not the file itself

    @property
    def kind(self) -> str:
        return "optimize" if isinstance(self.request, OptimizeRequest) else "profile"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "target_kind": self.target_kind,
            "synthesized": self.synthesized,
            "request": request_to_json(self.request),
        }

    @classmethod
    def from_json(cls, data: Any) -> WorkerJob:
        """The job `to_json` wrote; ProtocolError naming what does not fit."""
        if not isinstance(data, dict):
            raise ProtocolError("the job must be a JSON object")
        kind = data.get("kind")
        if kind not in JOB_KINDS:
            raise ProtocolError(f"unknown job kind {kind!r:.40}: use optimize or profile")
        try:
            about = read_fields(cls, data, "job", skip=("request",))
            request_class = OptimizeRequest if kind == "optimize" else ProfileRequest
            request = request_from_json(request_class, data.get("request"), "request")
        except (JSONShapeError, RequestError) as error:
            raise ProtocolError(f"a job that does not fit: {error}") from None
        return cls(request=request, **about)


def decode_job(line: bytes | str) -> WorkerJob:
    """The first line on the worker's stdin."""
    return WorkerJob.from_json(_object(line))


# -- what a job leaves -------------------------------------------------------------------------


@dataclass(frozen=True)
class JobResult:
    """A job's answer. For "optimize", `search` is the search's result; for a synthesized
    problem its `source` is a ModelNew module around the user's code, not an edit of the
    user's function. `profile` is the reference's (None when profiling was off or failed)."""

    kind: str  # "optimize" | "profile"
    target: str | None
    target_kind: str | None
    synthesized: bool
    profile: Profile | None = None
    hot_lines: tuple[dict[str, Any], ...] = ()  # the profile's hottest lines, for the editor
    search: SearchResult | None = None

    def to_json(self) -> dict[str, Any]:
        """The search result's own JSON (when there is one) with the job's keys beside it."""
        data = self.search.to_json() if self.search is not None else {}
        data.update(
            kind=self.kind,
            target=self.target,
            target_kind=self.target_kind,
            synthesized=self.synthesized,
            profile=self.profile.to_json() if self.profile is not None else None,
            hot_lines=[dict(line) for line in self.hot_lines],
        )
        return data

    @classmethod
    def from_json(cls, data: Any) -> JobResult:
        """The result `to_json` wrote; JSONShapeError naming the first field that does not fit."""
        if not isinstance(data, dict):
            raise JSONShapeError(f"a job result must be an object, not {type(data).__name__}")
        kind = data.get("kind")
        if kind not in JOB_KINDS:
            raise JSONShapeError(f"a job result's kind must be optimize or profile ({kind!r:.40})")
        values = read_fields(cls, data, "job result", skip=("search",))
        search = SearchResult.from_json(data) if kind == "optimize" else None
        return cls(**values, search=search)


# -- worker to server ------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """The search's resolved budget, sent before its first event: the progress bar's scale."""

    type: ClassVar[str] = "setup"
    iterations: int
    samples: int
    max_evals: int | None = None
    max_time: float | None = None


@dataclass(frozen=True)
class EventMessage:
    type: ClassVar[str] = "event"
    event: SearchEvent


@dataclass(frozen=True)
class ResultMessage:
    type: ClassVar[str] = "result"
    result: JobResult


@dataclass(frozen=True)
class ErrorMessage:
    """Why the job failed, in one line for the user."""

    type: ClassVar[str] = "error"
    error: str


WorkerMessage = Setup | EventMessage | ResultMessage | ErrorMessage
MESSAGES: dict[str, type[WorkerMessage]] = {
    cls.type: cls for cls in (Setup, EventMessage, ResultMessage, ErrorMessage)
}


def message_json(message: WorkerMessage) -> dict[str, Any]:
    """A worker message as its JSON object: its type, then its fields (an event or a result
    as its own `to_json`)."""
    data: dict[str, Any] = {"type": message.type}
    for item in fields(message):
        value = getattr(message, item.name)
        data[item.name] = value.to_json() if hasattr(value, "to_json") else value
    return data


def decode_message(line: bytes | str) -> WorkerMessage:
    """One line from the worker's pipe; ProtocolError for anything that is not a message."""
    data = _object(line)
    kind = data.get("type")
    cls = MESSAGES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        expected = ", ".join(MESSAGES)
        raise ProtocolError(f"unknown message type {kind!r:.40}: expected {expected}")
    try:
        return cls(**read_fields(cls, data, f"{kind} message"))
    except JSONShapeError as error:
        raise ProtocolError(f"a {kind} message that does not fit: {error}") from None


# -- server to worker ------------------------------------------------------------------------


@dataclass(frozen=True)
class Cancel:
    """Stop the search; the best verified kernel so far is still the result."""

    cmd: ClassVar[str] = "cancel"

    def to_json(self) -> dict[str, Any]:
        return {"cmd": self.cmd}


COMMANDS: dict[str, type[Cancel]] = {Cancel.cmd: Cancel}


def decode_command(line: bytes | str) -> Cancel:
    """One command line from the server; ProtocolError for anything else."""
    name = _object(line).get("cmd")
    command = COMMANDS.get(name) if isinstance(name, str) else None
    if command is None:
        raise ProtocolError(f"unknown command {name!r:.40}: expected cancel")
    return command()
