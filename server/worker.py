"""One job in its own process: `python -m server.worker --fd N`.

The language server starts one per optimisation or profile, so a crash, a hang or a leak in
the search (or in torch) cannot take the server with it. Protocol:

- stdin: first line, the job as JSON (`payload` in server/jobs.py: no secrets; those arrive
  in the environment). Later lines are commands: `{"cmd": "cancel"}`. End of stdin (the
  server went away) also cancels.
- fd N (a pipe of its own, so stray prints cannot corrupt it): JSON lines, each an object
  with "type": "setup" (the resolved budget), "event" (a search event's `to_json()`),
  "result" (the job's answer) or "error" (one line).
- SIGTERM cancels like the command: the search stops, its sandboxes are killed, and the best
  verified kernel so far is still reported as the result.
- stdout is sent to stderr; the server keeps stderr's tail as the reason for a crash.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import signal
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

CANCEL_EXIT_S = 20.0
"""After a cancel, the worker ends itself this long later even if the search has not."""


class Channel:
    """JSON lines on the dedicated fd; one writer at a time."""

    def __init__(self, fd: int) -> None:
        self._file = os.fdopen(fd, "w", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def send(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"type": kind, **_finite(fields)}, allow_nan=False)
        with self._lock:
            try:
                self._file.write(line + "\n")
                self._file.flush()
            except (BrokenPipeError, ValueError):  # the server is gone: nobody to tell
                pass


class JobFailure(Exception):
    """A reason for the user, one line."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server.worker")
    parser.add_argument("--fd", type=int, required=True, help="the pipe to write messages to")
    args = parser.parse_args(argv)
    os.set_inheritable(args.fd, False)  # sandbox children must not hold the pipe open
    channel = Channel(args.fd)
    sys.stdout = sys.stderr  # prints from libraries must not reach anything we parse
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    line = sys.stdin.readline()
    try:
        job = json.loads(line)
        if not isinstance(job, dict):
            raise ValueError("not an object")
    except ValueError:
        channel.send("error", error="the worker received no job on stdin")
        return 2
    cancel = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: _cancel(cancel))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the editor's terminal is not ours
    threading.Thread(target=_read_commands, args=(cancel,), daemon=True).start()
    try:
        result = run_job(job, channel, cancel)
    except JobFailure as error:
        channel.send("error", error=_one_line(str(error)))
        return 1
    except Exception as error:
        traceback.print_exc()
        channel.send("error", error=_one_line(f"{type(error).__name__}: {error}"))
        return 1
    channel.send("result", result=result)
    return 0


def _cancel(cancel: threading.Event) -> None:
    if cancel.is_set():
        return
    cancel.set()
    timer = threading.Timer(CANCEL_EXIT_S, lambda: os._exit(3))  # a search that will not stop
    timer.daemon = True
    timer.start()


def _read_commands(cancel: threading.Event) -> None:
    for line in sys.stdin:
        with contextlib.suppress(ValueError):
            if json.loads(line).get("cmd") == "cancel":
                _cancel(cancel)
    _cancel(cancel)  # stdin closed: the server is gone


def run_job(job: dict[str, Any], channel: Channel, cancel: threading.Event) -> dict[str, Any]:
    from server.job_settings import SettingsError, check_settings

    try:
        settings = check_settings(job.get("settings") or {})
    except SettingsError as error:
        raise JobFailure(str(error)) from None
    kind = job.get("kind")
    if kind == "profile":
        return _profile_job(job, settings, cancel)
    if kind == "optimize":
        return asyncio.run(_optimize_job(job, settings, channel, cancel))
    raise JobFailure(f"unknown job kind {kind!r}: use optimize or profile")


def _reference(job: dict[str, Any]):
    from agents.task import SourceFile

    label = job.get("path") or job.get("uri") or "<editor>"
    return SourceFile(job["problem"], label)


def _about(job: dict[str, Any]) -> dict[str, Any]:
    return {
        "target": job.get("target"),
        "target_kind": job.get("target_kind"),
        "synthesized": job.get("problem") != job.get("source"),
    }


def _profile_job(
    job: dict[str, Any], settings: dict[str, Any], cancel: threading.Event
) -> dict[str, Any]:
    from agents.profile.api import ProfileError, profile_file
    from agents.search.knowledge import hot_lines_json

    try:
        profile = profile_file(
            _reference(job),
            device=settings.get("device", "cpu"),
            size=settings.get("size", "default"),
            threads=settings.get("threads"),
            repeat=settings.get("repeat", 5),
            use_jail=settings.get("jail", True),
            cancel=cancel,
        )
    except ProfileError as error:
        raise JobFailure(str(error)) from None
    return {
        "kind": "profile",
        **_about(job),
        "profile": profile.to_json(),
        "hot_lines": hot_lines_json(profile),
    }


_ARG_NAMES = {"profile": "no_profile", "jail": "no_jail"}  # settings that the CLI inverts


async def _optimize_job(
    job: dict[str, Any], settings: dict[str, Any], channel: Channel, cancel: threading.Event
) -> dict[str, Any]:
    from agents.evaluate import EvalError
    from agents.llm.base import LLMError, MissingAPIKeyError
    from agents.optimize_command import (
        OptimizeUsageError,
        apply_search_defaults,
        build_search,
        optimize_defaults,
    )
    from agents.roles.factory import RoleSetupError
    from agents.search.beam import run_search
    from agents.search.budget import CancelToken
    from agents.search.knowledge import hot_lines_json
    from agents.task import TaskLoadError, outline_problem
    from memory.store import MemoryStoreError

    reference = _reference(job)
    try:
        outline_problem(reference)
    except TaskLoadError as error:
        raise JobFailure(str(error)) from None
    args = optimize_defaults(reference.label)
    with tempfile.TemporaryDirectory(prefix="kernel-agent-job-") as tmp:
        for name, value in settings.items():
            if name == "llm" and isinstance(value, dict):
                args.config = _write_llm_config(value, Path(tmp))
                args.llm = None
            elif name in _ARG_NAMES:
                setattr(args, _ARG_NAMES[name], not value)
            elif name in ("memory", "config"):
                setattr(args, name, Path(value))
            elif name != "repeat":
                setattr(args, name, value)
        apply_search_defaults(args)
        token = CancelToken()
        token.event = cancel  # SIGTERM, a cancel command and end of stdin all set it
        channel.send(
            "setup",
            iterations=args.iters,
            max_evals=args.max_evals,
            max_time=args.max_time,
            samples=args.samples,
        )

        def forward(event) -> None:
            channel.send("event", event=event.to_json())

        setup = None
        try:
            setup = build_search(
                args,
                reference,
                on_event=forward,
                cancel=token,
                task_name=str(job.get("target") or reference.label),
            )
            try:
                result = await run_search(setup.search)
            finally:
                for model in setup.models:
                    await model.aclose()
        except (OptimizeUsageError, RoleSetupError, MissingAPIKeyError, EvalError) as error:
            raise JobFailure(_hide_path(str(error), tmp)) from None
        except (LLMError, MemoryStoreError) as error:
            raise JobFailure(str(error)) from None
        finally:
            if setup is not None:
                setup.close()  # memory, and the evaluation pool (a local Ray stops here)
    profile = setup.search.reference_profile
    data = result.to_json()
    data.update(
        kind="optimize",
        **_about(job),
        profile=profile.to_json() if profile is not None else None,
        hot_lines=hot_lines_json(profile),
    )
    return data


def _write_llm_config(llm: dict[str, Any], folder: Path) -> Path:
    """A TOML file for build_roles' per-role settings (keys were refused before: none here)."""
    lines = ["[llm]"]
    tables = []
    for key, value in llm.items():
        if isinstance(value, dict):
            tables.append(f"\n[llm.{key}]")
            tables += [f"{k} = {_toml(v)}" for k, v in value.items() if v is not None]
        elif value is not None:
            lines.append(f"{key} = {_toml(value)}")
    path = folder / "llm.toml"
    path.write_text("\n".join(lines + tables) + "\n", encoding="utf-8")
    return path


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)  # a JSON string is a TOML basic string


def _hide_path(message: str, tmp: str) -> str:
    return message.replace(str(Path(tmp) / "llm.toml"), "settings")


def _finite(value: Any) -> Any:
    """JSON for the editor: NaN and infinities become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]


if __name__ == "__main__":
    sys.exit(main())
