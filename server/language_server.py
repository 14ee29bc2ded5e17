"""The language server's instance: pygls' server plus Kernel Agent's state and the small
services every feature shares (logging to the client, diagnostics, lens refresh, settings,
the memory, jobs as the editor shows them).

It imports no feature: the features in `server/features/` receive this instance at
registration (`server.app.create_server`) and only name its type, so the app can import
every feature without a cycle. Handlers only read the syntax tree and in-memory state, so
each answers in milliseconds; anything slow runs in a worker process through `JobManager`,
and the little blocking IO left (memory lookups, feedback writes, diff files) runs in a
thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import tempfile
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from agents import __version__
from agents.targets.analysis import Analysis
from agents.targets.edits import Rewrite
from agents.targets.hints import Hint
from agents.targets.model import Target
from server import lenses as L
from server.client_features import ClientFeatures
from server.diagnostics import ProfileView, finding_diagnostic, hint_diagnostic
from server.documents import Document, DocumentStore
from server.framing import max_body_from_env
from server.jobs import JobManager, JobSpec
from server.protocol import KernelAgentProtocol
from server.settings import SECTION, Settings, load

if TYPE_CHECKING:
    from memory.experiences import ExperienceStore
    from memory.store import MemoryStore

log = logging.getLogger("kernel_agent.server")

LENS_REFRESH_DELAY_S = 0.25
PUBLISH_DELAY_S = 0.15


@dataclass
class RunningJob:
    """A job the editor shows: its progress token and the latest percent/message."""

    job_id: str
    spec: JobSpec
    view: L.JobView
    token: str | None = None
    begun: bool = False
    explicit: bool = True  # started by the user (not profile-on-save): report the outcome
    ended: bool = False


@dataclass
class ParsedDocument:
    """The targets and hints of one version of a document."""

    version: int | None
    targets: list[Target]
    hints: list[Hint]


@dataclass
class ServerState:
    """What the handlers share: settings, the client, profiles, pending rewrites, jobs."""

    settings: Settings = field(default_factory=Settings)
    init_options: dict[str, Any] | None = None
    client: ClientFeatures = field(default_factory=ClientFeatures)
    views: dict[tuple[str, str], ProfileView] = field(default_factory=dict)
    pending: dict[tuple[str, str], Rewrite] = field(default_factory=dict)
    running: dict[str, RunningJob] = field(default_factory=dict)  # by job id
    parsed: dict[str, ParsedDocument] = field(default_factory=dict)


class KernelAgentServer(LanguageServer):
    """pygls' server plus Kernel Agent's state; handlers are registered by `create_server`."""

    def __init__(self) -> None:
        super().__init__("kernel-agent", __version__, protocol_cls=KernelAgentProtocol)
        self.docs = DocumentStore()
        self.state = ServerState()
        self.jobs = JobManager()
        self._memory: tuple[str | None, MemoryStore] | None = None
        self._memory_lock = threading.Lock()
        self._diff_dir: Path | None = None
        self._lens_refresh: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()
        self._publish_timers: dict[str, asyncio.TimerHandle] = {}
        # run at initialize, once the client's capabilities are known (see `on_initialize`)
        self.initialize_hooks: list[Callable[[], None]] = []
        self.max_message_bytes = max_body_from_env()

    # -- small services --------------------------------------------------------------------

    @property
    def encoding(self) -> str:
        try:
            return str(
                getattr(self.workspace.position_encoding, "value", self.workspace.position_encoding)
                or "utf-16"
            )
        except RuntimeError:
            return "utf-16"

    def log_line(self, message: str, kind: types.MessageType = types.MessageType.Log) -> None:
        log.info("%s", message)
        with contextlib.suppress(Exception):
            self.window_log_message(types.LogMessageParams(type=kind, message=message))

    def tell(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        """One line for the user (window/showMessage), copied to the log."""
        message = " ".join(message.split()) if "\n" not in message else message
        self.log_line(message, kind)
        with contextlib.suppress(Exception):
            self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        self.log_line(
            "background task failed: " + "".join(traceback.format_exception(error)),
            types.MessageType.Error,
        )

    def report_server_error(self, error: Exception, source) -> None:
        """Protocol-level errors (a malformed notification...) go to the log, not a popup."""
        self.log_line(
            f"server error ({getattr(source, '__name__', source)}): {error}",
            types.MessageType.Error,
        )

    def shutdown(self) -> None:
        """The process is ending: no worker may outlive it (their stdin closes too)."""
        for job in self.jobs.running():
            if job.pid:
                with contextlib.suppress(OSError):
                    os.killpg(job.pid, signal.SIGTERM)
        if self._diff_dir is not None:
            shutil.rmtree(self._diff_dir, ignore_errors=True)
        super().shutdown()

    def memory(self) -> ExperienceStore | None:
        """The optimisation memory, opened once per path (None when off or unreadable).
        Blocking (SQLite): call it from a thread. Imported here: it brings numpy, which
        the server's start-up need not wait for."""
        from memory.experiences import ExperienceStore
        from memory.store import MemoryStore, MemoryStoreError

        settings = self.state.settings
        if not settings.memory_enabled:
            return None
        with self._memory_lock:
            if self._memory is not None and self._memory[0] == settings.memory_path:
                return ExperienceStore(self._memory[1])
            self.close_memory()
            try:
                store = MemoryStore(settings.memory_path)
            except (MemoryStoreError, OSError) as error:
                log.warning("memory unavailable: %s", error)
                return None
            self._memory = (settings.memory_path, store)
            return ExperienceStore(store)

    def close_memory(self) -> None:
        """Close the optimisation memory (shutdown: no SQLite handle outlives the session)."""
        if self._memory is not None:
            self._memory[1].close()
            self._memory = None

    def diff_dir(self) -> Path:
        if self._diff_dir is None:
            self._diff_dir = Path(tempfile.mkdtemp(prefix="kernel-agent-diffs-"))
        return self._diff_dir

    # -- documents -------------------------------------------------------------------------

    def parsed(self, doc: Document) -> ParsedDocument:
        """Targets and hints of a document version (computed once per version, re-reading
        only what changed since the last version analysed)."""
        cached = self.state.parsed.get(doc.uri)
        if cached is not None and cached.version == doc.version:
            return cached
        if not isinstance(doc.analysis, Analysis):
            doc.analysis = Analysis()
        result = doc.analysis.refresh(doc)
        parsed = ParsedDocument(doc.version, result.targets, result.hints)
        self.state.parsed[doc.uri] = parsed
        return parsed

    def diagnostics(self, uri: str) -> list[types.Diagnostic]:
        doc = self.docs.get(uri)
        if doc is None:
            return []
        encoding = self.encoding
        out = [hint_diagnostic(h, doc, encoding) for h in self.parsed(doc).hints]
        for (view_uri, _target), view in self.state.views.items():
            if view_uri == uri:
                out.extend(finding_diagnostic(f, doc, encoding) for f in view.findings)
        return out

    def publish(self, uri: str) -> None:
        if self.state.client.pull_diagnostics:
            self.spawn(self._diagnostic_refresh())
            return
        doc = self.docs.get(uri)
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(
                uri=uri,
                version=doc.version if doc else None,
                diagnostics=self.diagnostics(uri) if doc else [],
            )
        )

    def publish_soon(self, uri: str) -> None:
        """Publish after typing pauses: one update per burst of keystrokes, not per key."""
        self.cancel_publish(uri)

        def fire() -> None:
            self._publish_timers.pop(uri, None)
            self.publish(uri)

        self._publish_timers[uri] = asyncio.get_running_loop().call_later(PUBLISH_DELAY_S, fire)

    def cancel_publish(self, uri: str) -> None:
        """Drop a publish still waiting for typing to pause (the document is closing)."""
        timer = self._publish_timers.pop(uri, None)
        if timer is not None:
            timer.cancel()

    async def _diagnostic_refresh(self) -> None:
        with contextlib.suppress(Exception):
            await self.workspace_diagnostic_refresh_async(None)

    def refresh_lenses(self) -> None:
        """Ask the client to re-request code lenses (throttled; only if it supports it)."""
        if not self.state.client.lens_refresh or self._lens_refresh is not None:
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._lens_refresh = None
            self.spawn(self._lens_refresh_now())

        self._lens_refresh = loop.call_later(LENS_REFRESH_DELAY_S, fire)

    async def _lens_refresh_now(self) -> None:
        with contextlib.suppress(Exception):
            await self.workspace_code_lens_refresh_async(None)

    # -- settings --------------------------------------------------------------------------

    async def reload_settings(self, pushed: Any = None) -> None:
        """initializationOptions, then the client's kernelAgent section (or what it pushed)."""
        section: Any = None
        if pushed is not None:
            section = pushed.get(SECTION, pushed) if isinstance(pushed, dict) else pushed
        elif self.state.client.configuration:
            try:
                items = await self.workspace_configuration_async(
                    types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)])
                )
                section = items[0] if items else None
            except Exception as error:
                self.log_line(f"workspace/configuration failed: {error}", types.MessageType.Warning)
        base = load(self.state.init_options, trust_keys=True)
        loaded = load(section if isinstance(section, dict) else None, base=base.settings)
        problems = base.problems + loaded.problems
        self.state.settings = loaded.settings
        self.log_line(f"settings: {loaded.settings.describe()}")
        if problems:
            self.tell(
                "Kernel Agent settings: "
                + "; ".join(dict.fromkeys(problems))
                + " (defaults used for those).",
                types.MessageType.Warning,
            )
        self.refresh_lenses()
