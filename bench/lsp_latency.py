"""Language-server latency while an optimisation job runs (issue 7).

    .venv/bin/python bench/lsp_latency.py --out /tmp/lsp_latency.json

Starts `python -m server` over stdio with pygls' LanguageClient (the capabilities of VS Code
1.65 as pytest-lsp records them, or Neovim 0.11's with `--client neovim`), opens a generated
Python file of about 2,000 lines (KernelBench problem 13 plus helper functions, dataclasses
and nn.Module blocks), profiles its `Model` (so hot lines carry findings and their hovers
query the memory), then starts an offline optimise job whose worker keeps searching in the
background, and times N (default 200) of each request, one after another with a short gap:

- textDocument/codeAction at a random line (a third of them on the Model class);
- textDocument/hover on a hot line (profile finding: Markdown table + memory lookup in a
  thread) and on any other line;
- textDocument/codeLens;
- didChange (a one-character incremental edit, undone by the next) until the next request (a
  codeAction) answers: the time an edit delays the editor's next answer;
- textDocument/diagnostic, when the client pulls diagnostics (VS Code does; Neovim 0.11 is
  pushed to).

Each sample notes whether the job's $/progress had begun and not ended when it was sent. It
prints a markdown table of p50/p95/max in milliseconds (targets: code action and hover p95
under 30 ms) and writes the samples and the summary as JSON with --out. Times are measured in
the client, so they include JSON-RPC over the pipe and pygls' own work on both sides.

Options: --n, --lines, --gap-ms, --client {visual-studio-code,neovim}, --no-job (the same
without a job, for comparison), --job-evals, --memory PATH (a memory file to read; default: a
fresh one in a temporary folder), --seed, --out.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from lsprotocol import types
from lsprotocol.converters import get_converter
from pygls.lsp.client import LanguageClient

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "bench" / "problems" / "13_gemm_divide_sum_scaling.py"
CLIENT_FILES = {
    "visual-studio-code": "visual_studio_code_v1.65.2.json",
    "neovim": "neovim_v0.11.0.json",
}
TARGET_MS = 30.0
EDIT_MARKER = "# latency-benchmark: edited here"


# --- the document ---------------------------------------------------------------------------


def _helper_function(i: int) -> str:
    return f'''def helper_{i:03d}(x: torch.Tensor, scale: float = {1 + i % 7}.0) -> torch.Tensor:
    """Helper {i}: a small tensor expression used by the blocks below."""
    y = x * scale + {i}
    if y.dim() > 1:
        y = y.mean(dim=-1, keepdim=True)
    for _ in range({1 + i % 3}):
        y = torch.relu(y) - 0.5 * y
    return y
'''


def _helper_dataclass(i: int) -> str:
    return f'''@dataclass
class Config{i:03d}:
    """Settings of block {i}."""

    width: int = {16 * (1 + i % 8)}
    depth: int = {1 + i % 4}
    dropout: float = 0.{i % 10}

    def describe(self) -> str:
        return f"block {i}: width={{self.width}} depth={{self.depth}}"
'''


def _helper_module(i: int) -> str:
    sync = "        _ = float(x.abs().max().item())\n" if i % 5 == 0 else ""
    return f'''class Block{i:03d}(nn.Module):
    """A residual block (not a target: the file's Model is)."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
{sync}        y = self.norm(torch.relu(self.proj(x)))
        return x + helper_{i:03d}(y)
'''


def generate_document(lines: int) -> str:
    """Problem 13 with helpers around its Model: about `lines` lines of importable Python."""
    problem = PROBLEM.read_text(encoding="utf-8")
    head, _, rest = problem.partition("class Model(")
    model, _, harness = rest.partition("def get_inputs(")
    head = head.replace("import torch\n", "from dataclasses import dataclass\n\nimport torch\n", 1)
    blocks: list[str] = []
    total = problem.count("\n") + 4
    i = 0
    while total < lines:
        for make in (_helper_function, _helper_dataclass, _helper_module):
            blocks.append(make(i))
            total += blocks[-1].count("\n") + 2
        i += 1
    half = len(blocks) // 2
    before, after = blocks[:half], blocks[half:]
    before.insert(len(before) // 2, EDIT_MARKER + "\n")
    return (
        head.rstrip("\n")
        + "\n\n\n"
        + "\n\n".join(before)
        + "\n\nclass Model("
        + model.rstrip("\n")
        + "\n\n\n"
        + "\n\n".join(after)
        + "\n\ndef get_inputs("
        + harness
    )


# --- the client -----------------------------------------------------------------------------


@dataclass
class Recorder:
    """What the server sent: progress intervals, diagnostics, messages, its stderr tail."""

    begun: dict[str, float] = field(default_factory=dict)
    ended: dict[str, float] = field(default_factory=dict)
    diagnostics: dict[str, list[types.Diagnostic]] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    stderr: collections.deque = field(default_factory=lambda: collections.deque(maxlen=40))
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def running(self, at: float) -> bool:
        return any(
            start <= at and (token not in self.ended or self.ended[token] > at)
            for token, start in self.begun.items()
        )


def make_client(recorder: Recorder) -> LanguageClient:
    client = LanguageClient("kernel-agent-latency", "1.0")

    @client.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)
    def progress_create(params: types.WorkDoneProgressCreateParams) -> None:
        return None

    @client.feature(types.PROGRESS)
    def progress(params: types.ProgressParams) -> None:
        kind = params.value.get("kind") if isinstance(params.value, dict) else None
        kind = kind or getattr(params.value, "kind", None)
        token = str(params.token)
        if kind == "begin":
            recorder.begun[token] = time.perf_counter()
        elif kind == "end":
            recorder.ended[token] = time.perf_counter()
        recorder.changed.set()

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def diagnostics(params: types.PublishDiagnosticsParams) -> None:
        recorder.diagnostics[params.uri] = list(params.diagnostics)
        recorder.changed.set()

    @client.feature(types.WINDOW_SHOW_MESSAGE)
    def show(params: types.ShowMessageParams) -> None:
        recorder.messages.append(params.message)
        recorder.changed.set()

    @client.feature(types.WINDOW_LOG_MESSAGE)
    def log(params: types.LogMessageParams) -> None:
        return None

    @client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
    def ask(params: types.ShowMessageRequestParams) -> None:
        recorder.messages.append(params.message)
        return None  # dismissed

    @client.feature(types.WORKSPACE_CONFIGURATION)
    def configuration(params: types.ConfigurationParams) -> list[Any]:
        return [None for _ in params.items]

    @client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
    def lens_refresh(params: None) -> None:
        return None

    @client.feature(types.WORKSPACE_DIAGNOSTIC_REFRESH)
    def diagnostic_refresh(params: None) -> None:
        recorder.changed.set()
        return None

    @client.feature(types.CLIENT_REGISTER_CAPABILITY)
    def register(params: types.RegistrationParams) -> None:
        return None

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
        return types.ApplyWorkspaceEditResult(applied=False, failure_reason="benchmark client")

    return client


def initialize_params(client_name: str, folder: Path, settings: dict[str, Any]):
    data = json.loads(
        resources.files("pytest_lsp.clients").joinpath(CLIENT_FILES[client_name]).read_text()
    )
    params = get_converter().structure(data, types.InitializeParams)
    params.process_id = os.getpid()
    params.root_uri = folder.as_uri()
    params.root_path = str(folder)
    params.workspace_folders = [types.WorkspaceFolder(uri=folder.as_uri(), name=folder.name)]
    params.initialization_options = {"kernelAgent": settings}
    return params


# --- measuring ------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class Series:
    name: str
    samples: list[float] = field(default_factory=list)  # ms
    with_job: list[bool] = field(default_factory=list)

    def add(self, ms: float, running: bool) -> None:
        self.samples.append(ms)
        self.with_job.append(running)

    def summary(self) -> dict[str, Any]:
        return {
            "n": len(self.samples),
            "p50_ms": round(percentile(self.samples, 0.5), 2),
            "p95_ms": round(percentile(self.samples, 0.95), 2),
            "max_ms": round(max(self.samples), 2) if self.samples else None,
            "share_with_job_running": round(sum(self.with_job) / max(1, len(self.with_job)), 3),
        }


async def wait_for(recorder: Recorder, predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        recorder.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(recorder.changed.wait(), min(remaining, 0.5))
    return True


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="kernel-agent-latency-"))
    path = folder / "big_model.py"
    text = generate_document(args.lines)
    path.write_text(text, encoding="utf-8")
    uri = path.as_uri()
    lines = text.split("\n")
    class_line = next(i for i, line in enumerate(lines) if line.startswith("class Model("))
    edit_line = lines.index(EDIT_MARKER)
    memory = args.memory or str(folder / "memory.sqlite3")
    settings = {
        "search": {
            "threads": 1,
            "timingBudget": 1.0,
            "maxEvals": args.job_evals,
            "profile": True,
        },
        "memory": {"path": memory},
    }
    recorder = Recorder()
    client = make_client(recorder)
    await client.start_io(sys.executable, "-m", "server", cwd=str(ROOT))
    server = client._server

    async def drain() -> None:
        while server is not None and server.stderr is not None:
            line = await server.stderr.readline()
            if not line:
                return
            recorder.stderr.append(line.decode(errors="replace").rstrip())

    drain_task = asyncio.create_task(drain())
    init = await client.initialize_async(initialize_params(args.client, folder, settings))
    client.initialized(types.InitializedParams())
    pull = init.capabilities.diagnostic_provider is not None
    version = 1
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=version, text=text
            )
        )
    )
    doc_id = types.TextDocumentIdentifier(uri=uri)

    async def execute(command: str, argument: dict[str, Any]) -> Any:
        return await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=command, arguments=[argument])
        )

    async def diagnostics_now() -> list[types.Diagnostic]:
        if not pull:
            return recorder.diagnostics.get(uri, [])
        report = await client.text_document_diagnostic_async(
            types.DocumentDiagnosticParams(text_document=doc_id)
        )
        return list(getattr(report, "items", []) or [])

    notes: list[str] = []
    # 1. Profile the Model: hot lines get findings (Information diagnostics) and rich hovers.
    started = time.perf_counter()
    answer = await execute("kernelAgent.profile", {"uri": uri, "target": "Model"})
    token = f"kernel-agent/{answer['jobId']}" if answer and answer.get("jobId") else None
    if token is None or not await wait_for(recorder, lambda: token in recorder.ended, 300):
        notes.append(f"the profile did not finish: {answer}")
    # The findings are published after the progress ends, with the "profiled" message.
    await wait_for(recorder, lambda: any("profiled" in m for m in recorder.messages), 30)
    hot: list[int] = []
    for _ in range(50):
        hot = sorted(
            {
                d.range.start.line
                for d in await diagnostics_now()
                if d.severity == types.DiagnosticSeverity.Information
            }
        )
        if hot:
            break
        await asyncio.sleep(0.1)
    profile_s = time.perf_counter() - started
    if not hot:
        notes.append("no hot lines after the profile: hovers on hot lines fall back to the class")
        hot = [class_line]

    # 2. An optimise job that keeps the worker busy while we measure.
    job_answer = None
    if not args.no_job:
        job_answer = await execute(
            "kernelAgent.optimize", {"uri": uri, "target": "Model", "backend": "offline"}
        )
        if not job_answer or not job_answer.get("started"):
            notes.append(f"the optimize job did not start: {job_answer}")
        else:
            job_token = f"kernel-agent/{job_answer['jobId']}"
            await wait_for(recorder, lambda: job_token in recorder.begun, 30)
            await asyncio.sleep(args.warmup_s)  # let the worker get going (imports, profile)

    series = {
        name: Series(name)
        for name in (
            "codeAction",
            "hover (hot line)",
            "hover (other line)",
            "codeLens",
            "didChange → next answer",
        )
    }
    if pull:
        series["diagnostic (pull)"] = Series("diagnostic (pull)")
    gap = args.gap_ms / 1000

    def position(line: int) -> types.Position:
        return types.Position(line=line, character=4)

    inserted = False
    for i in range(args.n):
        line = class_line + 1 if i % 3 == 0 else rng.randrange(len(lines))
        t0 = time.perf_counter()
        await client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=doc_id,
                range=types.Range(start=position(line), end=position(line)),
                context=types.CodeActionContext(
                    diagnostics=[], trigger_kind=types.CodeActionTriggerKind.Automatic
                ),
            )
        )
        series["codeAction"].add((time.perf_counter() - t0) * 1000, recorder.running(t0))
        await asyncio.sleep(gap)

        for name, target in (
            ("hover (hot line)", hot[i % len(hot)]),
            ("hover (other line)", rng.randrange(len(lines))),
        ):
            t0 = time.perf_counter()
            await client.text_document_hover_async(
                types.HoverParams(text_document=doc_id, position=position(target))
            )
            series[name].add((time.perf_counter() - t0) * 1000, recorder.running(t0))
            await asyncio.sleep(gap)

        t0 = time.perf_counter()
        await client.text_document_code_lens_async(types.CodeLensParams(text_document=doc_id))
        series["codeLens"].add((time.perf_counter() - t0) * 1000, recorder.running(t0))
        await asyncio.sleep(gap)

        # An edit on the marker comment (inserted, then removed), then the next request.
        version += 1
        column = len(EDIT_MARKER)
        change = types.TextDocumentContentChangePartial(
            range=types.Range(
                start=types.Position(edit_line, column),
                end=types.Position(edit_line, column + (1 if inserted else 0)),
            ),
            text="" if inserted else "!",
        )
        inserted = not inserted
        t0 = time.perf_counter()
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[change],
            )
        )
        await client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=doc_id,
                range=types.Range(start=position(class_line), end=position(class_line)),
                context=types.CodeActionContext(diagnostics=[]),
            )
        )
        series["didChange → next answer"].add(
            (time.perf_counter() - t0) * 1000, recorder.running(t0)
        )
        await asyncio.sleep(gap)
        if pull:
            t0 = time.perf_counter()
            await diagnostics_now()
            series["diagnostic (pull)"].add((time.perf_counter() - t0) * 1000, recorder.running(t0))
            await asyncio.sleep(gap)

    jobs_left = await execute("kernelAgent.jobs", {})
    if job_answer and job_answer.get("jobId"):
        await execute("kernelAgent.cancel", {"jobId": job_answer["jobId"]})
    with contextlib.suppress(Exception):
        await asyncio.wait_for(client.shutdown_async(None), 30)
        client.exit(None)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(client.stop(), 15)
    drain_task.cancel()

    summary = {name: s.summary() for name, s in series.items()}
    in_process = analysis_costs(text)
    shutil.rmtree(folder, ignore_errors=True)  # the document and, by default, the memory
    return {
        "date": datetime.date.today().isoformat(),
        "machine": cpu_model(),
        "cores": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "client": args.client,
        "pull_diagnostics": pull,
        "document_lines": len(lines),
        "hot_lines": hot,
        "profile_s": round(profile_s, 1),
        "job": job_answer,
        "jobs_running_at_end": jobs_left,
        "notes": notes + [m for m in recorder.messages if "failed" in m],
        "messages": recorder.messages,
        "summary": summary,
        "in_process_per_change": in_process,
        "samples": {name: s.samples for name, s in series.items()},
        "targets_met": {
            name: summary[name]["p95_ms"] < TARGET_MS
            for name in ("codeAction", "hover (hot line)", "hover (other line)")
        },
    }


def analysis_costs(text: str, repeat: int = 30) -> dict[str, dict[str, Any]]:
    """What the server recomputes on every didChange, timed in this process (ms): the
    incremental reparse, find_targets and find_hints over the whole document."""
    from agents.targets.find import find_targets
    from agents.targets.hints import find_hints
    from server.documents import Document

    lines = text.split("\n")
    line, column = lines.index(EDIT_MARKER), len(EDIT_MARKER)
    doc = Document("file:///latency/big_model.py", text, 1)
    costs: dict[str, Series] = {
        name: Series(name) for name in ("reparse (Document.apply)", "find_targets", "find_hints")
    }
    for i in range(repeat):
        t0 = time.perf_counter()
        doc.apply((line, column), (line, column), "!", 2 * i + 2)
        doc.apply((line, column), (line, column + 1), "", 2 * i + 3)
        costs["reparse (Document.apply)"].add((time.perf_counter() - t0) * 500, False)
        t0 = time.perf_counter()
        targets = find_targets(doc.root)
        costs["find_targets"].add((time.perf_counter() - t0) * 1000, False)
        t0 = time.perf_counter()
        find_hints(doc.root, targets)
        costs["find_hints"].add((time.perf_counter() - t0) * 1000, False)
    return {name: series.summary() for name, series in costs.items()}


def cpu_model() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def markdown(result: dict[str, Any]) -> str:
    rows = [
        "| request | n | p50 (ms) | p95 (ms) | max (ms) | with job running |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, s in result["summary"].items():
        rows.append(
            f"| {name} | {s['n']} | {s['p50_ms']:.1f} | {s['p95_ms']:.1f} | {s['max_ms']:.1f} "
            f"| {s['share_with_job_running']:.0%} |"
        )
    rows += [
        "",
        "Recomputed on every didChange, timed in-process (no LSP; same document):",
        "",
        "| step | n | p50 (ms) | p95 (ms) | max (ms) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, s in result["in_process_per_change"].items():
        rows.append(
            f"| {name} | {s['n']} | {s['p50_ms']:.1f} | {s['p95_ms']:.1f} | {s['max_ms']:.1f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="samples of each request")
    parser.add_argument("--lines", type=int, default=2000, help="size of the generated file")
    parser.add_argument("--gap-ms", type=float, default=10.0, help="pause between requests")
    parser.add_argument("--client", choices=sorted(CLIENT_FILES), default="visual-studio-code")
    parser.add_argument("--no-job", action="store_true", help="measure without a running job")
    parser.add_argument("--job-evals", type=int, default=60, help="the job's evaluation budget")
    parser.add_argument("--warmup-s", type=float, default=5.0, help="wait after starting the job")
    parser.add_argument("--memory", default=None, help="memory file (default: a fresh one)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args))
    print(
        f"{result['date']} · {result['machine']} ({result['cores']} cores, load "
        f"{result['load_average'][0]:.2f}) · client {result['client']} · "
        f"{result['document_lines']} lines · job: "
        f"{'none' if args.no_job else (result['job'] or {}).get('state', 'not started')}"
    )
    print(markdown(result))
    for note in result["notes"]:
        print(f"note: {note}")
    met = result["targets_met"]
    print(
        "targets (p95 < 30 ms): "
        + ", ".join(f"{name} {'met' if ok else 'MISSED'}" for name, ok in met.items())
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
