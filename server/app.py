"""The language server: LSP wiring over documents, targets, jobs, diagnostics and edits.

Handlers only read the syntax tree and in-memory state, so each answers in milliseconds;
anything slow (a search, a profile) runs in a worker process through `JobManager`, and the
little blocking IO left (memory lookups for hover, feedback writes, diff files) runs in a
thread. Errors a user can act on become one window/showMessage line; details and stack
traces go to window/logMessage only.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import inspect
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import wraps
from pathlib import Path
from threading import Event
from typing import Any
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.io_ import StdinAsyncReader, StdoutWriter, run_async
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.uris import from_fs_path, to_fs_path

from agents import __version__
from agents.profile.report import Profile
from memory.experiences import ExperienceStore
from memory.store import MemoryStore, MemoryStoreError
from server import lenses as L
from server.diagnostics import (
    SOURCE,
    Finding,
    ProfileView,
    build_view,
    finding_diagnostic,
    hint_diagnostic,
    shift,
)
from server.documents import Document, DocumentStore, index_to_char
from server.edits import EditRefused, Rewrite, TextChange, apply_changes, build_accept
from server.feedback import record_decision
from server.hints import Hint, find_hints
from server.hover import hot_line_markdown, lessons_for
from server.jobs import Job, JobManager, JobRefused, JobSpec, JobUpdate
from server.settings import SECTION, Settings, load
from server.targets import Target, find_targets, target_at

log = logging.getLogger("kernel_agent.server")

ACTION_KIND = types.CodeActionKind.RefactorRewrite
QUICKFIX_KIND = types.CodeActionKind.QuickFix
ANNOTATION_ID = "kernel-agent.rewrite"
LENS_REFRESH_DELAY_S = 0.25
PUBLISH_DELAY_S = 0.15


@dataclass
class ClientFeatures:
    """What the client says it can do; read once at initialize."""

    progress: bool = False
    lens_refresh: bool = False
    pull_diagnostics: bool = False
    annotations: bool = False
    document_changes: bool = False
    message_actions: bool = False
    show_document: bool = False
    configuration: bool = False
    dynamic_configuration: bool = False
    resolve_properties: frozenset[str] = frozenset()
    action_literals: bool = False
    disabled_actions: bool = False
    icons: bool = False
    name: str = "unknown client"

    @classmethod
    def of(cls, caps: types.ClientCapabilities, info: types.ClientInfo | None) -> ClientFeatures:
        window, workspace, text = caps.window, caps.workspace, caps.text_document
        edit = workspace.workspace_edit if workspace else None
        action = text.code_action if text else None
        resolve = action.resolve_support if action else None
        name = info.name if info else "unknown client"
        return cls(
            progress=bool(window and window.work_done_progress),
            lens_refresh=bool(
                workspace and workspace.code_lens and workspace.code_lens.refresh_support
            ),
            pull_diagnostics=bool(
                text
                and text.diagnostic is not None
                and workspace
                and workspace.diagnostics
                and workspace.diagnostics.refresh_support
            ),
            annotations=bool(edit and edit.change_annotation_support is not None),
            document_changes=bool(edit and edit.document_changes),
            message_actions=bool(
                window
                and window.show_message
                and window.show_message.message_action_item is not None
            ),
            show_document=bool(window and window.show_document and window.show_document.support),
            configuration=bool(workspace and workspace.configuration),
            dynamic_configuration=bool(
                workspace
                and workspace.did_change_configuration
                and workspace.did_change_configuration.dynamic_registration
            ),
            resolve_properties=frozenset(resolve.properties if resolve else ()),
            action_literals=bool(action and action.code_action_literal_support),
            disabled_actions=bool(action and action.disabled_support),
            icons="code" in name.lower() or "visual studio" in name.lower(),
            name=name,
        )


@dataclass
class _Parsed:
    version: int | None
    targets: list[Target]
    hints: list[Hint]


@dataclass
class _Running:
    """A job the editor shows: its progress token and the latest percent/message."""

    job_id: str
    spec: JobSpec
    view: L.JobView
    token: str | None = None
    begun: bool = False
    explicit: bool = True  # started by the user (not profile-on-save): report the outcome
    ended: bool = False


@dataclass
class _State:
    settings: Settings = field(default_factory=Settings)
    init_options: dict[str, Any] | None = None
    client: ClientFeatures = field(default_factory=ClientFeatures)
    views: dict[tuple[str, str], ProfileView] = field(default_factory=dict)
    pending: dict[tuple[str, str], Rewrite] = field(default_factory=dict)
    running: dict[str, _Running] = field(default_factory=dict)  # by job id
    parsed: dict[str, _Parsed] = field(default_factory=dict)


class _Answered:
    """A request already answered with an error: `handle_message` ignores it."""

    jsonrpc = "answered"


class KernelAgentProtocol(LanguageServerProtocol):
    """pygls drops a request whose params do not fit its type without answering; the
    client would wait forever. Answer it with InvalidParams instead."""

    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException as error:
            if not (isinstance(data, dict) and "id" in data and "method" in data):
                raise
            cause = " ".join(str(error.__cause__ or error).split())[:300]
            reply = JsonRpcInvalidParams(message=f"invalid params for {data['method']}: {cause}")
            self._send_response(data["id"], error=reply.to_response_error())
            return _Answered()


class KernelAgentServer(LanguageServer):
    """pygls' server plus Kernel Agent's state; handlers are registered by `create_server`."""

    def __init__(self) -> None:
        super().__init__("kernel-agent", __version__, protocol_cls=KernelAgentProtocol)
        self.docs = DocumentStore()
        self.state = _State()
        self.jobs = JobManager()
        self._memory: tuple[str | None, MemoryStore] | None = None
        self._memory_lock = threading.Lock()
        self._diff_dir: Path | None = None
        self._lens_refresh: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()
        self._publish_timers: dict[str, asyncio.TimerHandle] = {}

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
        Blocking (SQLite): call it from a thread."""
        settings = self.state.settings
        if not settings.memory_enabled:
            return None
        with self._memory_lock:
            if self._memory is not None and self._memory[0] == settings.memory_path:
                return ExperienceStore(self._memory[1])
            if self._memory is not None:
                self._memory[1].close()
                self._memory = None
            try:
                store = MemoryStore(settings.memory_path)
            except (MemoryStoreError, OSError) as error:
                log.warning("memory unavailable: %s", error)
                return None
            self._memory = (settings.memory_path, store)
            return ExperienceStore(store)

    def diff_dir(self) -> Path:
        if self._diff_dir is None:
            self._diff_dir = Path(tempfile.mkdtemp(prefix="kernel-agent-diffs-"))
        return self._diff_dir

    # -- documents -------------------------------------------------------------------------

    def parsed(self, doc: Document) -> _Parsed:
        """Targets and hints of a document version (computed once per version)."""
        cached = self.state.parsed.get(doc.uri)
        if cached is not None and cached.version == doc.version:
            return cached
        targets = find_targets(doc.root)
        parsed = _Parsed(doc.version, targets, find_hints(doc.root, targets))
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
        timer = self._publish_timers.pop(uri, None)
        if timer is not None:
            timer.cancel()

        def fire() -> None:
            self._publish_timers.pop(uri, None)
            self.publish(uri)

        self._publish_timers[uri] = asyncio.get_running_loop().call_later(PUBLISH_DELAY_S, fire)

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


# --- helpers --------------------------------------------------------------------------------


def _arg(args: tuple, *required: str) -> dict[str, Any]:
    """The command's single object argument, checked (InvalidParams otherwise)."""
    if len(args) != 1 or not isinstance(args[0], dict):
        raise JsonRpcInvalidParams(
            message=f"expected one object argument with {', '.join(required)}"
        )
    value = args[0]
    for name in required:
        if not isinstance(value.get(name), str) or not value[name]:
            raise JsonRpcInvalidParams(message=f"argument {name!r} must be a non-empty string")
    return value


def _guarded(ls: KernelAgentServer, what: str):
    """Unexpected errors in a handler: one line to the client, the trace to the log."""

    def fail(error: Exception) -> JsonRpcException:
        ls.log_line(
            f"{what} failed: " + "".join(traceback.format_exception(error)),
            types.MessageType.Error,
        )
        return JsonRpcException(
            message=f"Kernel Agent: {what} failed: {type(error).__name__}: {error}"
        )

    def decorate(fn: Callable):
        if inspect.iscoroutinefunction(fn):

            @wraps(fn)
            async def wrapper(*args, **kwargs):
                try:
                    return await fn(*args, **kwargs)
                except JsonRpcException:
                    raise
                except Exception as error:
                    raise fail(error) from None

            return wrapper

        @wraps(fn)
        def sync_wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except JsonRpcException:
                raise
            except Exception as error:
                raise fail(error) from None

        return sync_wrapper

    return decorate


def _position(doc: Document, line: int, index: int, encoding: str) -> types.Position:
    text = doc.line(line).rstrip("\r") if line < len(doc.lines) else ""
    return types.Position(line=line, character=index_to_char(text, min(index, len(text)), encoding))


def _text_edit_range(lines: list[str], change: TextChange, encoding: str) -> types.Range:
    def pos(line: int, index: int) -> types.Position:
        text = lines[line].rstrip("\r") if line < len(lines) else ""
        return types.Position(
            line=line, character=index_to_char(text, min(index, len(text)), encoding)
        )

    return types.Range(start=pos(*change.start), end=pos(*change.end))


def _path(uri: str) -> str | None:
    try:
        return to_fs_path(uri)
    except Exception:
        return None


def _read_disk(uri: str) -> str | None:
    path = _path(uri)
    if not path:
        return None
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _job_json(job: Job) -> dict[str, Any]:
    return {
        "jobId": job.id,
        "kind": job.spec.kind,
        "uri": job.spec.uri,
        "target": job.spec.target,
        "state": job.state,
        "percent": job.percent,
        "message": job.message,
        "pid": job.pid,
        "error": job.error,
    }


# --- the server -----------------------------------------------------------------------------


def create_server() -> KernelAgentServer:
    ls = KernelAgentServer()

    # -- lifecycle ---------------------------------------------------------------------------

    @ls.feature(types.INITIALIZE)
    def initialize(params: types.InitializeParams) -> None:
        state = ls.state
        state.client = ClientFeatures.of(params.capabilities, params.client_info)
        options = params.initialization_options
        state.init_options = options if isinstance(options, dict) else None
        loaded = load(state.init_options, trust_keys=True)
        state.settings = loaded.settings
        ls.jobs = JobManager(max_concurrent=loaded.settings.max_jobs)
        if (
            state.client.pull_diagnostics
            and types.TEXT_DOCUMENT_DIAGNOSTIC not in ls.protocol.fm.features
        ):
            ls.feature(
                types.TEXT_DOCUMENT_DIAGNOSTIC,
                types.DiagnosticOptions(
                    identifier=SOURCE, inter_file_dependencies=False, workspace_diagnostics=False
                ),
            )(pull_diagnostics)

    @ls.feature(types.INITIALIZED)
    async def initialized(params: types.InitializedParams) -> None:
        client = ls.state.client
        ls.log_line(
            f"kernel-agent {__version__} serving {client.name}: progress={client.progress} "
            f"pullDiagnostics={client.pull_diagnostics} annotations={client.annotations} "
            f"lensRefresh={client.lens_refresh} encoding={ls.encoding}"
        )
        if client.dynamic_configuration:
            with contextlib.suppress(Exception):
                await ls.client_register_capability_async(
                    types.RegistrationParams(
                        registrations=[
                            types.Registration(
                                id="kernel-agent-configuration",
                                method=types.WORKSPACE_DID_CHANGE_CONFIGURATION,
                                register_options={"section": SECTION},
                            )
                        ]
                    )
                )
        await ls.reload_settings()

    @ls.feature(types.SHUTDOWN)
    async def shutdown(params: Any = None) -> None:
        ls.log_line("shutting down: ending every worker")
        await ls.jobs.shutdown()
        if ls._memory is not None:
            ls._memory[1].close()
            ls._memory = None

    @ls.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(params: types.DidChangeConfigurationParams) -> None:
        pushed = params.settings if isinstance(params.settings, dict) and params.settings else None
        if pushed is not None and SECTION not in pushed and ls.state.client.configuration:
            pushed = None  # a bare "something changed": ask for our section
        await ls.reload_settings(pushed)

    # -- documents ---------------------------------------------------------------------------

    @ls.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: types.DidOpenTextDocumentParams) -> None:
        item = params.text_document
        ls.docs.open(item.uri, item.text, item.version)
        ls.publish(item.uri)

    @ls.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        doc = ls.docs.get(uri)
        if doc is None:
            return
        encoding = ls.encoding
        moved = False
        for change in params.content_changes:
            if isinstance(change, types.TextDocumentContentChangePartial):
                r = change.range
                edit = doc.apply(
                    (r.start.line, r.start.character),
                    (r.end.line, r.end.character),
                    change.text,
                    params.text_document.version,
                    encoding,
                )
            else:
                edit = doc.replace_all(change.text, params.text_document.version)
            for key, view in ls.state.views.items():
                if key[0] == uri:
                    view.findings, changed = shift(view.findings, edit)
                    moved |= changed
        with contextlib.suppress(Exception):  # pygls' copy is the reference: resync on drift
            known = ls.workspace.text_documents
            reference = (known.get(uri) or known[unquote(uri)]).source
            if reference != doc.text:
                ls.log_line(f"document drifted from the client's text; reparsing {uri}")
                doc.replace_all(reference, params.text_document.version)
                for key in [k for k in ls.state.views if k[0] == uri]:
                    ls.state.views.pop(key)
        ls.publish_soon(uri)
        if moved:
            ls.refresh_lenses()

    @ls.feature(types.TEXT_DOCUMENT_DID_SAVE)
    async def did_save(params: types.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        doc = ls.docs.get(uri)
        if doc is None or not ls.state.settings.profile_on_save:
            return
        for target in ls.parsed(doc).targets:
            if target.ready and ls.jobs.find(uri, target.name) is None:
                await start_job("profile", doc, target, backend="offline", explicit=False)

    @ls.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        timer = ls._publish_timers.pop(uri, None)
        if timer is not None:
            timer.cancel()
        ls.docs.close(uri)
        ls.state.parsed.pop(uri, None)
        for key in [k for k in ls.state.views if k[0] == uri]:
            ls.state.views.pop(key)
        if not ls.state.client.pull_diagnostics:
            ls.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=uri, diagnostics=[])
            )

    @_guarded(ls, "diagnostics")
    async def pull_diagnostics(params: types.DocumentDiagnosticParams):
        return types.RelatedFullDocumentDiagnosticReport(
            items=ls.diagnostics(params.text_document.uri)
        )

    # -- code actions ------------------------------------------------------------------------

    def wanted(kind: str, only: list[str] | None) -> bool:
        return not only or any(kind == o or kind.startswith(o + ".") for o in only)

    def action(
        title: str, kind: str, data: dict[str, Any], command: types.Command | None
    ) -> types.CodeAction:
        resolvable = "command" in ls.state.client.resolve_properties
        return types.CodeAction(
            title=title,
            kind=kind,
            data=data,
            command=None if resolvable else command,
        )

    def command_for(data: dict[str, Any]) -> types.Command | None:
        args = {"uri": data["uri"], "target": data["target"]}
        name = data.get("action")
        if name == "optimize":
            return types.Command(
                title="Optimize",
                command=L.CMD_OPTIMIZE,
                arguments=[{**args, "backend": data.get("backend", "offline")}],
            )
        if name == "profile":
            return types.Command(title="Profile", command=L.CMD_PROFILE, arguments=[args])
        if name == "show":
            return types.Command(title="Show diff", command=L.CMD_DIFF, arguments=[args])
        return None

    @ls.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(
            resolve_provider=True, code_action_kinds=[ACTION_KIND, QUICKFIX_KIND]
        ),
    )
    @_guarded(ls, "code actions")
    def code_action(params: types.CodeActionParams):
        uri = params.text_document.uri
        doc = ls.docs.get(uri)
        if doc is None:
            return None
        only = [str(getattr(k, "value", k)) for k in (params.context.only or [])]
        first, last = params.range.start.line, params.range.end.line
        targets = ls.parsed(doc).targets
        hits = [t for t in targets if any(t.covers(line) for line in range(first, last + 1))]
        if not hits:
            hit = target_at(targets, first)
            hits = [hit] if hit else []
        settings = ls.state.settings
        out: list[types.CodeAction] = []
        rewrite_kind = str(ACTION_KIND.value)
        for target in hits[:3]:
            base = {"uri": uri, "target": target.name}
            if (uri, target.name) in ls.state.pending and wanted(rewrite_kind, only):
                rewrite = ls.state.pending[(uri, target.name)]
                data = {**base, "action": "show"}
                out.append(
                    action(
                        f"Show pending rewrite of `{target.name}` ({rewrite.summary})",
                        ACTION_KIND,
                        data,
                        command_for(data),
                    )
                )
            if wanted(rewrite_kind, only):
                data = {**base, "action": "optimize", "backend": "offline"}
                item = action(
                    f"Optimize {target.label} `{target.name}`", ACTION_KIND, data, command_for(data)
                )
                if not target.ready and ls.state.client.disabled_actions:
                    item.disabled = types.CodeActionDisabled(reason=target.missing or "not ready")
                out.append(item)
                if settings.llm_model_label and target.ready:
                    data = {**base, "action": "optimize", "backend": "llm"}
                    out.append(
                        action(
                            f"Optimize `{target.name}` with `{settings.llm_model_label}`",
                            ACTION_KIND,
                            data,
                            command_for(data),
                        )
                    )
                if target.ready:
                    data = {**base, "action": "profile"}
                    out.append(
                        action(
                            f"Profile {target.label} `{target.name}`",
                            ACTION_KIND,
                            data,
                            command_for(data),
                        )
                    )
            if not target.ready and target.snippet and wanted(str(QUICKFIX_KIND.value), only):
                what = target.snippet.split("(", 1)[0].replace("def ", "")
                data = {**base, "action": "insert", "snippet": target.snippet}
                item = action(
                    f"Add {what}() template for `{target.name}`", QUICKFIX_KIND, data, None
                )
                if "edit" not in ls.state.client.resolve_properties:
                    item.edit = insertion_edit(doc, target.snippet)
                out.append(item)
        if not ls.state.client.action_literals:
            return [a.command for a in out if a.command is not None] or None
        return out or None

    def insertion_edit(doc: Document, snippet: str) -> types.WorkspaceEdit:
        last = len(doc.lines) - 1
        text = doc.line(last)
        prefix = "\n" * (3 if text.strip() else 2) if doc.text else ""
        end = _position(doc, last, len(text), ls.encoding)
        return types.WorkspaceEdit(
            changes={
                doc.uri: [
                    types.TextEdit(
                        range=types.Range(start=end, end=end),
                        new_text=prefix + snippet.rstrip("\n"),
                    )
                ]
            }
        )

    @ls.feature(types.CODE_ACTION_RESOLVE)
    @_guarded(ls, "code action resolve")
    def code_action_resolve(item: types.CodeAction) -> types.CodeAction:
        data = item.data if isinstance(item.data, dict) else None
        if (
            not data
            or not isinstance(data.get("uri"), str)
            or not isinstance(data.get("target"), str)
        ):
            return item
        if data.get("action") == "insert":
            doc = ls.docs.get(data["uri"])
            if doc is not None and isinstance(data.get("snippet"), str) and item.edit is None:
                item.edit = insertion_edit(doc, data["snippet"])
            return item
        if item.command is None:
            item.command = command_for(data)
        return item

    # -- lenses and hover --------------------------------------------------------------------

    @ls.feature(types.TEXT_DOCUMENT_CODE_LENS, types.CodeLensOptions(resolve_provider=False))
    @_guarded(ls, "code lenses")
    def code_lens(params: types.CodeLensParams):
        uri = params.text_document.uri
        doc = ls.docs.get(uri)
        if doc is None:
            return None
        targets = ls.parsed(doc).targets
        jobs = {
            r.spec.target: r.view
            for r in ls.state.running.values()
            if r.spec.uri == uri and not r.ended
        }
        pending = {t: rw for (u, t), rw in ls.state.pending.items() if u == uri}
        items = L.lenses_for(
            uri, targets, jobs, pending, ls.state.settings.llm_model_label, ls.state.client.icons
        )
        out = []
        for lens in items:
            position = types.Position(line=lens.line, character=0)
            out.append(
                types.CodeLens(
                    range=types.Range(start=position, end=position),
                    command=types.Command(
                        title=lens.title, command=lens.command, arguments=lens.arguments
                    ),
                )
            )
        return out

    @ls.feature(types.TEXT_DOCUMENT_HOVER)
    @_guarded(ls, "hover")
    async def hover(params: types.HoverParams):
        uri = params.text_document.uri
        doc = ls.docs.get(uri)
        if doc is None:
            return None
        line = params.position.line
        for view in [v for (u, _t), v in ls.state.views.items() if u == uri]:
            for finding in view.findings:
                if finding.line == line:
                    return await hot_line_hover(finding, view, doc)
        target = next((t for t in ls.parsed(doc).targets if t.name_line == line), None)
        if target is not None and (uri, target.name) in ls.state.pending:
            rewrite = ls.state.pending[(uri, target.name)]
            text = (
                f"**kernel-agent** · a rewrite of `{target.name}` is waiting: {rewrite.summary} "
                f"on {rewrite.device}"
                + (f" ({', '.join(rewrite.methods)})" if rewrite.methods else "")
                + ".\n\nUse the code lens above: Accept · Reject · Show diff."
            )
            return types.Hover(
                contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text)
            )
        return None

    async def hot_line_hover(finding: Finding, view: ProfileView, doc: Document) -> types.Hover:
        try:
            lessons = await asyncio.to_thread(lambda: lessons_for(ls.memory(), finding, view))
        except Exception as error:
            ls.log_line(f"memory lookup failed: {error}", types.MessageType.Warning)
            lessons = []
        text = doc.line(finding.line).rstrip("\r")
        start = len(text) - len(text.lstrip())
        return types.Hover(
            contents=types.MarkupContent(
                kind=types.MarkupKind.Markdown, value=hot_line_markdown(finding, view, lessons)
            ),
            range=types.Range(
                start=_position(doc, finding.line, start, ls.encoding),
                end=_position(doc, finding.line, len(text), ls.encoding),
            ),
        )

    # -- jobs --------------------------------------------------------------------------------

    def resolve_target(args: dict[str, Any]) -> tuple[Document, Target]:
        doc = ls.docs.get(args["uri"])
        if doc is None:
            raise JsonRpcInvalidParams(message=f"{args['uri']} is not open in the editor")
        target = next((t for t in ls.parsed(doc).targets if t.name == args["target"]), None)
        if target is None:
            raise JsonRpcInvalidParams(
                message=f"no optimisation target named {args['target']!r} in {args['uri']}"
            )
        return doc, target

    async def start_job(
        kind: str, doc: Document, target: Target, *, backend: str, explicit: bool = True
    ) -> dict[str, Any]:
        settings = ls.state.settings
        if not target.ready:
            explain_missing(doc, target, kind)
            return {"started": False, "reason": target.missing, "snippet": target.snippet}
        chosen = "offline" if backend == "offline" or kind == "profile" else None
        if chosen is None:
            missing = settings.missing_key()
            if missing:
                ls.tell(f"Kernel Agent: {missing}", types.MessageType.Error)
                return {"started": False, "reason": missing}
        spec = JobSpec(
            kind=kind,
            uri=doc.uri,
            target=target.name,
            target_kind=target.kind,
            source=doc.text,
            path=_path(doc.uri),
            settings=settings.job_settings(chosen),
            env=settings.job_env(chosen),
        )
        holder: dict[str, _Running] = {}

        async def on_update(update: JobUpdate) -> None:
            running = ls.state.running.get(update.job_id) or holder.get("run")
            if running is None:
                running = _Running(
                    update.job_id,
                    spec,
                    L.JobView(update.job_id, kind, 0, "starting"),
                    explicit=explicit,
                )
                holder["run"] = running
                ls.state.running[update.job_id] = running
            await job_update(running, update)

        try:
            job = await ls.jobs.start(spec, on_update)
        except JobRefused as error:
            if explicit:
                ls.tell(f"Kernel Agent: {error}", types.MessageType.Warning)
            else:
                ls.log_line(f"profile on save skipped for `{target.name}`: {error}")
            return {"started": False, "reason": str(error)}
        running = holder.get("run")
        if running is None and job.running:
            running = _Running(
                job.id, spec, L.JobView(job.id, kind, job.percent, job.message), explicit=explicit
            )
            holder["run"] = ls.state.running[job.id] = running
        ls.refresh_lenses()
        if running is not None and job.running and ls.state.client.progress:
            await begin_progress(running, target)
        return {
            "started": job.state != "failed",
            "jobId": job.id,
            "pid": job.pid,
            "state": job.state,
        }

    def explain_missing(doc: Document, target: Target, kind: str) -> None:
        """What to add before `target` can run: offered as an insertion where the client
        can ask, else shown with the snippet."""
        message = f"Kernel Agent: `{target.name}` cannot be {kind}d yet. {target.missing}"
        if not target.snippet:
            ls.tell(message, types.MessageType.Warning)
            return
        if not ls.state.client.message_actions:
            ls.tell(message + " Add:\n" + target.snippet, types.MessageType.Warning)
            return
        insert = "Insert template"

        async def ask() -> None:
            ls.log_line(message + " Template:\n" + target.snippet)
            try:
                answer = await ls.window_show_message_request_async(
                    types.ShowMessageRequestParams(
                        type=types.MessageType.Warning,
                        message=message,
                        actions=[types.MessageActionItem(title=insert)],
                    )
                )
            except Exception as error:
                ls.log_line(f"showMessageRequest unanswered: {error}")
                return
            current = ls.docs.get(doc.uri)
            if getattr(answer, "title", None) == insert and current is not None:
                edit = insertion_edit(current, target.snippet or "")
                await ls.workspace_apply_edit_async(
                    types.ApplyWorkspaceEditParams(edit=edit, label="Kernel Agent: template")
                )

        ls.spawn(ask())

    async def begin_progress(running: _Running, target: Target) -> None:
        token = f"kernel-agent/{running.job_id}"
        try:
            await ls.work_done_progress.create_async(token)
        except Exception as error:
            ls.log_line(f"progress not created: {error}", types.MessageType.Warning)
            return
        verb = "Optimizing" if running.spec.kind == "optimize" else "Profiling"
        ls.work_done_progress.begin(
            token,
            types.WorkDoneProgressBegin(
                title=f"{verb} `{target.name}`",
                cancellable=True,
                message=running.view.message,
                percentage=running.view.percent,
            ),
        )
        if running.ended:  # it ended while the client created the progress
            ls.work_done_progress.end(
                token, types.WorkDoneProgressEnd(message=running.view.message)
            )
            ls.work_done_progress.tokens.pop(token, None)
            return
        running.token = token
        running.begun = True
        future = ls.work_done_progress.tokens.get(token)
        if future is not None:
            job_id = running.job_id

            def cancelled(fut) -> None:
                if fut.cancelled():
                    ls.log_line(f"job {job_id}: cancelled from the progress bar")
                    ls.spawn(ls.jobs.cancel(job_id))

            future.add_done_callback(cancelled)

    async def job_update(running: _Running, update: JobUpdate) -> None:
        state = update.state
        if state == "event":
            describe_event(running, update.event or {})
            return
        if state in ("started", "progress"):
            running.view = L.JobView(
                running.job_id,
                running.spec.kind,
                update.percent or running.view.percent,
                update.message or running.view.message,
            )
            if running.begun and running.token:
                ls.work_done_progress.report(
                    running.token,
                    types.WorkDoneProgressReport(
                        message=running.view.message,
                        percentage=running.view.percent,
                        cancellable=True,
                    ),
                )
            ls.refresh_lenses()
            return
        running.ended = True
        ls.state.running.pop(running.job_id, None)
        running.view = L.JobView(running.job_id, running.spec.kind, 100, update.message or state)
        if running.begun and running.token:
            ls.work_done_progress.end(
                running.token, types.WorkDoneProgressEnd(message=update.message or state)
            )
            ls.work_done_progress.tokens.pop(running.token, None)
        try:
            if state == "failed":
                job_failed(running, update)
            else:
                job_finished(running, update)
        finally:
            ls.refresh_lenses()

    def describe_event(running: _Running, event: dict[str, Any]) -> None:
        kind = event.get("kind")
        name = running.spec.target
        if kind == "candidate":
            speed = f" {event['speedup']:.2f}x" if event.get("speedup") else ""
            reason = f" ({event['reason']})" if event.get("reason") else ""
            plan = event.get("plan", "")
            ls.log_line(f"[{name}] candidate {plan}: {event.get('verdict')}{speed}{reason}")
        elif kind == "new_best":
            ls.log_line(
                f"[{name}] new best: {event.get('speedup', 0):.2f}x ({event.get('plan', '')})"
            )
        elif kind in ("started", "iteration", "finished", "failed", "plan"):
            detail = {k: v for k, v in event.items() if k not in ("kind", "beam_speedups")}
            ls.log_line(f"[{name}] {kind}: {detail}")
        elif kind == "profiled":
            ls.log_line(f"[{name}] profile:\n{event.get('summary', '')}")

    def job_failed(running: _Running, update: JobUpdate) -> None:
        verb = "optimizing" if running.spec.kind == "optimize" else "profiling"
        reason = update.error or update.message or "the worker failed"
        ls.tell(
            f"Kernel Agent: {verb} `{running.spec.target}` failed: {reason}",
            types.MessageType.Error,
        )

    def job_finished(running: _Running, update: JobUpdate) -> None:
        spec, result = running.spec, update.result or {}
        doc = ls.docs.get(spec.uri)
        profile_data = result.get("profile")
        if isinstance(profile_data, dict) and doc is not None:
            try:
                profile = Profile.from_json(profile_data)
            except (KeyError, TypeError, ValueError) as error:
                ls.log_line(
                    f"unreadable profile from job {running.job_id}: {error}",
                    types.MessageType.Warning,
                )
            else:
                view = build_view(
                    profile,
                    doc,
                    target=spec.target,
                    target_kind=spec.target_kind,
                    source=spec.source,
                )
                snapshot_lines = spec.source.count("\n") + 1
                view.findings = [f for f in view.findings if f.stat.line <= snapshot_lines]
                ls.state.views[(spec.uri, spec.target)] = view
                ls.publish(spec.uri)
        if spec.kind == "profile":
            view = ls.state.views.get((spec.uri, spec.target))
            hot = len(view.findings) if view else 0
            summary = f"Kernel Agent: profiled `{spec.target}`: {hot} hot line(s) marked"
            if view and view.findings:
                top = view.findings[0]
                summary += f"; hottest: line {top.line + 1} ({top.stat.share:.0%})"
            if running.explicit:
                ls.tell(summary)
            else:
                ls.log_line(summary)
            return
        for note in result.get("notes") or []:
            ls.log_line(f"[{spec.target}] note: {note}")
        source = result.get("source")
        cancelled = update.state == "cancelled"
        if result.get("improved") and isinstance(source, str) and source.strip():
            ci = result.get("speedup_ci")
            rewrite = Rewrite(
                job_id=running.job_id,
                uri=spec.uri,
                target=spec.target,
                target_kind=spec.target_kind,
                snapshot=spec.source,
                source=source,
                speedup=float(result.get("speedup") or 1.0),
                device=str(result.get("device") or ls.state.settings.device),
                confirmed=bool(result.get("confirmed", not cancelled)),
                methods=tuple(str(m) for m in result.get("methods") or ()),
                speedup_ci=(float(ci[0]), float(ci[1]))
                if isinstance(ci, list) and len(ci) == 2
                else None,
            )
            ls.state.pending[(spec.uri, spec.target)] = rewrite
            offer(rewrite, result)
            return
        stopped = result.get("stopped_because") or update.state
        verdicts = Counter(
            str(p.get("verdict")) for p in result.get("trajectory") or [] if isinstance(p, dict)
        )
        if verdicts and not verdicts.get("correct"):
            stopped += "; candidates: " + ", ".join(f"{n} {v}" for v, n in verdicts.most_common())
            if verdicts.get("timeout"):
                stopped += (
                    " (an evaluation timed out: try kernelAgent.size default or a faster device)"
                )
        if cancelled:
            ls.tell(
                f"Kernel Agent: optimizing `{spec.target}` was cancelled; "
                "no verified faster kernel so far."
            )
        else:
            ls.tell(
                f"Kernel Agent: no verified improvement for `{spec.target}` "
                f"({result.get('evaluations', 0)} candidates evaluated; stopped: {stopped})."
            )

    def offer(rewrite: Rewrite, result: dict[str, Any]) -> None:
        methods = f" ({', '.join(rewrite.methods)})" if rewrite.methods else ""
        message = (
            f"Kernel Agent: `{rewrite.target}` rewrite ready: {rewrite.summary} on "
            f"{rewrite.device}{methods}, "
            f"after {result.get('evaluations', 0)} evaluations."
        )
        if not ls.state.client.message_actions:
            ls.tell(message + " Use the code lens: Accept · Reject · Show diff.")
            return

        async def ask() -> None:
            ls.log_line(message)
            try:
                answer = await ls.window_show_message_request_async(
                    types.ShowMessageRequestParams(
                        type=types.MessageType.Info,
                        message=message,
                        actions=[
                            types.MessageActionItem(title=t)
                            for t in ("Accept", "Reject", "Show diff")
                        ],
                    )
                )
            except Exception as error:
                ls.log_line(f"showMessageRequest unanswered: {error}")
                return
            title = getattr(answer, "title", None)
            args = {"uri": rewrite.uri, "target": rewrite.target}
            if ls.state.pending.get((rewrite.uri, rewrite.target)) is not rewrite:
                return  # decided meanwhile through a lens or a command
            if title == "Accept":
                await accept(args)
            elif title == "Reject":
                await reject(args)
            elif title == "Show diff":
                await show_diff(args)

        ls.spawn(ask())

    # -- commands ----------------------------------------------------------------------------

    @ls.command(L.CMD_OPTIMIZE)
    @_guarded(ls, "optimize")
    async def optimize_command(*args: Any) -> dict[str, Any]:
        value = _arg(args, "uri", "target")
        backend = value.get("backend", "offline")
        if backend not in ("offline", "llm"):
            raise JsonRpcInvalidParams(message="argument 'backend' must be 'offline' or 'llm'")
        doc, target = resolve_target(value)
        return await start_job("optimize", doc, target, backend=backend)

    @ls.command(L.CMD_PROFILE)
    @_guarded(ls, "profile")
    async def profile_command(*args: Any) -> dict[str, Any]:
        doc, target = resolve_target(_arg(args, "uri", "target"))
        return await start_job("profile", doc, target, backend="offline")

    @ls.command(L.CMD_CANCEL)
    @_guarded(ls, "cancel")
    async def cancel_command(*args: Any) -> dict[str, Any]:
        if len(args) != 1 or not isinstance(args[0], dict):
            raise JsonRpcInvalidParams(
                message="expected one object argument with jobId, or uri and target"
            )
        value = args[0]
        job = ls.jobs.get(value["jobId"]) if isinstance(value.get("jobId"), str) else None
        if (
            job is None
            and isinstance(value.get("uri"), str)
            and isinstance(value.get("target"), str)
        ):
            job = ls.jobs.find(value["uri"], value["target"])
        if job is None or not job.running:
            ls.tell("Kernel Agent: no running job to cancel there.", types.MessageType.Info)
            return {"cancelled": False}
        ls.spawn(ls.jobs.cancel(job.id))  # returns once the worker has ended: do not wait here
        return {"cancelled": True, "jobId": job.id}

    @ls.command(L.CMD_JOBS)
    @_guarded(ls, "jobs")
    async def jobs_command(*args: Any) -> list[dict[str, Any]]:
        jobs = ls.jobs.running()
        value = args[0] if args and isinstance(args[0], dict) else {}
        if isinstance(value.get("target"), str):
            jobs = [j for j in jobs if j.spec.target == value["target"]]
        if isinstance(value.get("uri"), str):
            jobs = [j for j in jobs if j.spec.uri == value["uri"]]
        if value.get("show"):
            for job in jobs:
                status = f"{job.percent}% {job.message}"
                ls.tell(f"Kernel Agent: {job.spec.kind} `{job.spec.target}`: {status}")
        return [_job_json(job) for job in jobs]

    async def accept(value: dict[str, Any]) -> dict[str, Any]:
        uri, name = value["uri"], value["target"]
        rewrite = ls.state.pending.get((uri, name))
        if rewrite is None:
            ls.tell(f"Kernel Agent: no rewrite of `{name}` is waiting.", types.MessageType.Info)
            return {"applied": False, "reason": "no rewrite waiting"}
        doc = ls.docs.get(uri)
        text = doc.text if doc is not None else _read_disk(uri)
        if text is None:
            ls.tell(
                f"Kernel Agent: cannot read {uri}; open it and accept again.",
                types.MessageType.Error,
            )
            return {"applied": False, "reason": "document unavailable"}
        try:
            plan = build_accept(text, rewrite, ls.state.settings.rewrite_mode)
        except EditRefused as refusal:
            ls.tell(f"Kernel Agent: {refusal}", types.MessageType.Warning)
            return {"applied": False, "reason": str(refusal)}
        lines = text.split("\n")
        encoding = ls.encoding
        client = ls.state.client
        edits: list[types.TextEdit | types.AnnotatedTextEdit] = []
        for change in plan.changes:
            r = _text_edit_range(lines, change, encoding)
            if client.annotations and client.document_changes:
                edits.append(
                    types.AnnotatedTextEdit(
                        range=r, new_text=change.text, annotation_id=ANNOTATION_ID
                    )
                )
            else:
                edits.append(types.TextEdit(range=r, new_text=change.text))
        label = f"Kernel Agent: {plan.mode} `{name}` ({rewrite.summary})"
        if client.document_changes:
            edit = types.WorkspaceEdit(
                document_changes=[
                    types.TextDocumentEdit(
                        text_document=types.OptionalVersionedTextDocumentIdentifier(
                            uri=uri, version=doc.version if doc is not None else None
                        ),
                        edits=edits,
                    )
                ],
                change_annotations=(
                    {
                        ANNOTATION_ID: types.ChangeAnnotation(
                            label=label,
                            needs_confirmation=True,
                            description="A verified, faster rewrite of the kernel",
                        )
                    }
                    if client.annotations
                    else None
                ),
            )
        else:
            edit = types.WorkspaceEdit(changes={uri: edits})
        result = await ls.workspace_apply_edit_async(
            types.ApplyWorkspaceEditParams(edit=edit, label=label)
        )
        if not result.applied:
            reason = result.failure_reason or "the editor declined it"
            ls.tell(
                f"Kernel Agent: the rewrite of `{name}` was not applied ({reason}); "
                "it is still waiting.",
                types.MessageType.Warning,
            )
            return {"applied": False, "reason": reason}
        if ls.state.pending.get((uri, name)) is rewrite:
            ls.state.pending.pop((uri, name))
        decision = await asyncio.to_thread(
            record_decision,
            rewrite.source,
            True,
            ls.state.settings.memory_path,
            ls.state.settings.memory_enabled,
        )
        ls.log_line(f"[{name}] feedback: {decision.summary}")
        extra = f" {plan.note}." if plan.note else ""
        renamed = (
            " Renamed to avoid clashes: "
            + ", ".join(f"{a} → {b}" for a, b in plan.renamed.items())
            + "."
            if plan.renamed
            else ""
        )
        where = f"as `{plan.new_name}`" if plan.mode == "alongside" else "in place"
        ls.tell(
            f"Kernel Agent: applied the rewrite of `{name}` {where} "
            f"({rewrite.summary}).{extra}{renamed}"
        )
        ls.refresh_lenses()
        return {
            "applied": True,
            "mode": plan.mode,
            "name": plan.new_name,
            "feedback": decision.lessons,
        }

    @ls.command(L.CMD_ACCEPT)
    @_guarded(ls, "accept")
    async def accept_command(*args: Any) -> dict[str, Any]:
        return await accept(_arg(args, "uri", "target"))

    async def reject(value: dict[str, Any]) -> dict[str, Any]:
        uri, name = value["uri"], value["target"]
        rewrite = ls.state.pending.pop((uri, name), None)
        if rewrite is None:
            ls.tell(f"Kernel Agent: no rewrite of `{name}` is waiting.", types.MessageType.Info)
            return {"rejected": False}
        decision = await asyncio.to_thread(
            record_decision,
            rewrite.source,
            False,
            ls.state.settings.memory_path,
            ls.state.settings.memory_enabled,
        )
        ls.log_line(f"[{name}] feedback: {decision.summary}")
        ls.tell(
            f"Kernel Agent: discarded the rewrite of `{name}`; memory will rank its lessons lower."
        )
        ls.refresh_lenses()
        return {"rejected": True, "feedback": decision.lessons}

    @ls.command(L.CMD_REJECT)
    @_guarded(ls, "reject")
    async def reject_command(*args: Any) -> dict[str, Any]:
        return await reject(_arg(args, "uri", "target"))

    async def show_diff(value: dict[str, Any]) -> dict[str, Any]:
        uri, name = value["uri"], value["target"]
        rewrite = ls.state.pending.get((uri, name))
        if rewrite is None:
            ls.tell(f"Kernel Agent: no rewrite of `{name}` is waiting.", types.MessageType.Info)
            return {"shown": False}
        doc = ls.docs.get(uri)
        text = doc.text if doc is not None else (_read_disk(uri) or rewrite.snapshot)
        note = ""
        try:
            plan = build_accept(text, rewrite, ls.state.settings.rewrite_mode)
        except EditRefused as refusal:
            note = (
                f"# {refusal}\n# This diff is against the code as it was when the search started.\n"
            )
            text = rewrite.snapshot
            plan = build_accept(text, rewrite, ls.state.settings.rewrite_mode)
        new_text = apply_changes(text, plan.changes)
        label = Path(_path(uri) or "document.py").name
        diff = "".join(
            difflib.unified_diff(
                text.splitlines(keepends=True),
                new_text.splitlines(keepends=True),
                fromfile=f"a/{label}",
                tofile=f"b/{label} (kernel-agent: {rewrite.summary})",
            )
        )
        header = (
            f"# Kernel Agent: rewrite of `{name}` ({plan.mode}): {rewrite.summary} on "
            f"{rewrite.device}"
            + (f" ({', '.join(rewrite.methods)})" if rewrite.methods else "")
            + "\n"
        )
        path = ls.diff_dir() / f"{Path(label).stem}.{name}.diff"
        await asyncio.to_thread(path.write_text, header + note + diff, "utf-8")
        file_uri = from_fs_path(str(path)) or path.as_uri()
        if ls.state.client.show_document:
            try:
                await ls.window_show_document_async(
                    types.ShowDocumentParams(uri=file_uri, take_focus=True)
                )
            except Exception as error:
                ls.log_line(f"showDocument failed: {error}", types.MessageType.Warning)
                ls.tell(f"Kernel Agent: the diff is in {path}")
        else:
            ls.tell(f"Kernel Agent: the diff is in {path}")
        return {"shown": True, "uri": file_uri, "path": str(path)}

    @ls.command(L.CMD_DIFF)
    @_guarded(ls, "show diff")
    async def show_diff_command(*args: Any) -> dict[str, Any]:
        return await show_diff(_arg(args, "uri", "target"))

    return ls


def serve_stdio(ls: KernelAgentServer) -> None:
    """Serve over stdin/stdout; when the client goes away, end every worker first."""
    ls._stop_event = Event()
    reader = StdinAsyncReader(sys.stdin.buffer, ls.thread_pool)
    writer = StdoutWriter(sys.stdout.buffer)
    ls.protocol.set_writer(writer)

    async def main() -> None:
        try:
            await run_async(
                stop_event=ls._stop_event,
                reader=reader,
                protocol=ls.protocol,
                logger=log,
                error_handler=ls.report_server_error,
            )
        finally:
            await ls.jobs.shutdown()

    try:
        asyncio.run(main())
    except (BrokenPipeError, KeyboardInterrupt, SystemExit):
        pass
    finally:
        ls.shutdown()


def serve_tcp(ls: KernelAgentServer, host: str, port: int) -> None:
    """Serve one client on HOST:PORT; when it disconnects or exits, end every worker and
    stop (pygls' own TCP loop lets `exit` escape as an unhandled SystemExit)."""
    ls._stop_event = Event()

    async def main() -> None:
        finished = asyncio.Event()

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            ls.protocol.set_writer(writer)  # type: ignore[arg-type]
            try:
                await run_async(
                    stop_event=ls._stop_event,
                    reader=reader,
                    protocol=ls.protocol,
                    logger=log,
                    error_handler=ls.report_server_error,
                )
            except SystemExit:
                pass
            finally:
                await ls.jobs.shutdown()
                finished.set()

        server = await asyncio.start_server(connection, host, port)
        async with server:
            await finished.wait()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    finally:
        ls.shutdown()


def configure_logging(verbose: bool) -> None:
    """stderr only: stdout belongs to the protocol."""
    level = logging.DEBUG if verbose else logging.WARNING
    logging.basicConfig(level=level, format="kernel-agent: %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
