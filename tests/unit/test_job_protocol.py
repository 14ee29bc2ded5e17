"""The job protocol between the language server and its worker: every message reads back
as the one written (NaN and infinities as null, read back as NaN), a garbled line is one
clear ProtocolError, and the editor's settings reach the worker's OptimizeRequest by the
request's own field paths (agents/request/table.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from agents.profile.report import Ceilings, LineStat, OpStat, Profile, Roofline
from agents.request.requests import OptimizeRequest, ProfileRequest
from agents.request.table import BY_PATH
from agents.search import events as ev
from agents.search.fates import CandidateFate, Fate
from agents.search.result import SearchResult, TrajectoryPoint
from server.job_protocol import (
    Cancel,
    ErrorMessage,
    EventMessage,
    JobResult,
    ProtocolError,
    ResultMessage,
    Setup,
    decode_command,
    decode_job,
    decode_message,
    encode,
    message_json,
)
from server.job_settings import SettingsError
from server.jobs import JobSpec, _payload
from server.settings import REQUEST_PATHS, Settings, load
from server.worker import message_fd

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "bench" / "problems" / "17_manual_softmax.py"
FUNCTION = """import torch


def double(x):
    return x * 2


def get_inputs():
    return [torch.randn(4, 4)]
"""


def profile() -> Profile:
    op = OpStat(
        "aten::mul", 1, 0.5, 1.0, [[4, 4]], "torch.float32", 16, 128, 0.125, "memory", 12.5, 0.01
    )
    line = LineStat(
        "f.py",
        5,
        "forward",
        "return x * 2",
        0.5,
        1.0,
        16,
        128,
        0.125,
        "memory",
        12.5,
        0.01,
        ops=[op],
    )
    return Profile(
        "f.py",
        "cpu",
        "default",
        1,
        5,
        "2.5",
        0.6,
        0.5,
        0.5,
        1.0,
        [line],
        [op],
        Roofline(16, 128, 128, 0.125, 0.001, 0.01, 0.01, "memory", 1.6),
        Ceilings("cpu", "test cpu", 1, 10.0, 100.0, None, "2026-12-07T00:00:00Z"),
        notes=["a note"],
    )


def search_result(**changes) -> SearchResult:
    values = dict(
        task="Model",
        device="cpu",
        improved=True,
        verdict="correct",
        speedup=2.5,
        speedup_ci=[2.4, 2.6],
        confirmed=True,
        source="class ModelNew: pass\n",
        methods=["fuse"],
        evaluations=3,
        iterations=1,
        stopped_because="budget",
        elapsed_s=1.5,
        cost={"tokens": 0, "cost_usd": 0.0},
        planner="offline",
        executor="offline",
        trajectory=[TrajectoryPoint(1, 1, "fuse", "fuse", 0, 0, "correct", 2.5, 2.5, 0.4)],
        eval_report={"verdict": "correct", "timing": {"runs": 5}},
        candidates=(CandidateFate("fuse", "fuse", Fate.CHOSEN, "correct", vs_reference=2.5),),
    )
    values.update(changes)
    return SearchResult(**values)


def wire(message) -> bytes:
    return encode(message_json(message)).encode() + b"\n"


@pytest.mark.parametrize(
    "message",
    [
        Setup(iterations=6, samples=1, max_evals=100, max_time=None),
        EventMessage(ev.PlanMade(1, 0, "fuse", "fuse")),
        EventMessage(ev.Started("t", "cpu", "offline", "offline", 3, 6, 1, 6)),
        ErrorMessage("the model said no"),
        ResultMessage(
            JobResult(
                "optimize",
                "Model",
                "module",
                False,
                profile(),
                ({"line": 5, "share": 1.0},),
                search_result(),
            )
        ),
        ResultMessage(
            JobResult(
                "optimize",
                "f",
                "function",
                True,
                None,
                (),
                search_result(improved=False, source=None, candidates=()),
            )
        ),
        ResultMessage(
            JobResult("profile", "Model", "module", False, profile(), ({"line": 5, "share": 1.0},))
        ),
    ],
)
def test_every_worker_message_reads_back_as_written(message):
    assert decode_message(wire(message)) == message


def test_nan_crosses_as_null_and_reads_back_as_nan():
    line = wire(EventMessage(ev.NewBest(1, math.inf, "p", 1)))
    assert b"null" in line and b"Infinity" not in line
    event = decode_message(line).event
    assert isinstance(event, ev.NewBest) and math.isnan(event.speedup)
    result = JobResult("optimize", "M", "module", False, search=search_result(speedup=math.nan))
    assert math.isnan(decode_message(wire(ResultMessage(result))).result.search.speedup)


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b"this is not a message\n", "not JSON"),
        (b"[1, 2]\n", "not a JSON object"),
        (b'{"type": "gossip"}\n', "unknown message type 'gossip'"),
        (b'{"type": "event", "event": {"kind": "plan", "iteration": 1}}\n', "plan event has no"),
        (b'{"type": "result", "result": {"kind": "dance"}}\n', "kind must be optimize or profile"),
        (
            b'{"type": "result", "result": {"kind": "optimize", "target": "M",'
            b' "target_kind": "module", "synthesized": false}}\n',
            "result has no task",
        ),
        (b'{"type": "error", "error": 3}\n', "error must be a string"),
        (b'{"type": "setup", "iterations": "many", "samples": 1}\n', "iterations"),
        (b"\xff\xfe\n", "not JSON"),
    ],
)
def test_a_garbled_line_is_one_clear_protocol_error(line, says):
    with pytest.raises(ProtocolError) as error:
        decode_message(line)
    assert says in str(error.value) and "\n" not in str(error.value)


def test_commands_are_cancel_or_an_error():
    assert decode_command(json.dumps(Cancel().to_json())) == Cancel()
    for line in ('{"cmd": "explode"}', '{"cmd": ["cancel"]}', "cancel"):
        with pytest.raises(ProtocolError):
            decode_command(line)


def test_the_worker_takes_its_pipe_from_fd_alone():
    assert message_fd(["--fd", "7"]) == 7 and message_fd(["--fd=12"]) == 12
    for argv in ([], ["--fd"], ["--fd", "x"], ["--fd", "3", "--verbose"], ["7"]):
        assert message_fd(argv) is None


def spec(kind: str = "optimize", settings: dict | None = None, **changes) -> JobSpec:
    values = dict(
        kind=kind,
        uri=SOFTMAX.as_uri(),
        target="Model",
        target_kind="module",
        source=SOFTMAX.read_text(),
        path=str(SOFTMAX),
        settings=settings or {},
    )
    values.update(changes)
    return JobSpec(**values)


def test_the_editors_settings_become_the_workers_request_by_field_path(tmp_path):
    loaded = load(
        {
            "kernelAgent": {
                "search": {"iterations": 3, "maxEvals": 7, "timingBudget": 0.5, "profile": False},
                "memory": {"enabled": False, "path": str(tmp_path / "m.db")},
                "jail": False,
                "device": "cpu",
                "llm": {"planner": {"backend": "offline"}},
            }
        }
    )
    assert not loaded.problems
    job = decode_job(json.dumps(_payload(spec(settings=loaded.settings.job_settings()))))
    request = job.request
    assert isinstance(request, OptimizeRequest) and job.kind == "optimize"
    assert request.search.iterations == 3 and request.search.profile is False
    assert request.budget.max_evals == 7 and request.evaluation.timing_budget == 0.5
    assert request.memory.enabled is False and request.memory.path == tmp_path / "m.db"
    assert request.evaluation.jail is False and request.llm.offline
    assert request.target.name == "Model" and request.target.problem.path == str(SOFTMAX)
    assert not job.synthesized and job.target == "Model"
    assert OptimizeRequest.from_json(request.to_json()) == request


def test_every_search_setting_of_the_editor_has_one_request_field():
    for name, path in REQUEST_PATHS.items():
        assert name in Settings.__dataclass_fields__ and path in BY_PATH
    editor_only = {
        "profile_on_save",
        "rewrite_mode",
        "max_jobs",
        "api_keys",
        "roles",
        "backend",
        "model",
        "base_url",
    }
    assert set(Settings.__dataclass_fields__) - set(REQUEST_PATHS) == editor_only
    assert set(Settings().job_settings()) <= set(BY_PATH)


def test_a_plain_function_travels_synthesized_and_a_profile_as_its_request(tmp_path):
    path = tmp_path / "double.py"
    path.write_text(FUNCTION)
    function = spec(
        uri=path.as_uri(), target="double", target_kind="function", source=FUNCTION, path=str(path)
    )
    job = decode_job(json.dumps(_payload(function)))
    assert job.synthesized and job.target_kind == "function"
    assert (
        job.request.target.original == FUNCTION and "class Model" in job.request.target.problem.text
    )
    settings = {"evaluation.threads": 2, "evaluation.jail": False, "search.beam": 2}
    profile_job = decode_job(json.dumps(_payload(spec("profile", settings))))
    assert profile_job.kind == "profile" and isinstance(profile_job.request, ProfileRequest)
    assert profile_job.request.threads == 2 and profile_job.request.jail is False


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"search.iterations": 0}, "search.iterations"),
        ({"iters": 3}, "iters"),
        ({"llm.roles.planner.api_key": "sk-secret"}, "keys go in the job's env"),
        ({"evaluation.size": "huge"}, "size"),
        ({"memory.enabled": "no"}, "memory.enabled"),
        ({"llm.base_url": "ftp://x"}, "llm.base_url"),
    ],
)
def test_a_bad_setting_is_one_line_before_any_worker(settings, named):
    with pytest.raises(SettingsError) as error:
        _payload(spec(settings=settings))
    assert named in str(error.value) and "\n" not in str(error.value)
    assert "sk-secret" not in str(error.value)


def test_a_garbled_job_is_refused_with_one_line():
    good = _payload(spec())
    for data, says in [
        ({**good, "kind": "dance"}, "unknown job kind"),
        ({**good, "request": {**good["request"], "search": {"beam": "wide"}}}, "search.beam"),
        ({k: v for k, v in good.items() if k != "target"}, "job has no target"),
    ]:
        with pytest.raises(ProtocolError, match=says):
            decode_job(json.dumps(data))


SAMPLE_VALUES = {
    "evaluation.device": "cuda",
    "evaluation.size": "gpu",
    "evaluation.eval_backend": "ray",
    "evaluation.ray_address": "ray://head:10001",
    "memory.path": "/tmp/kernel-agent-test/memory.db",
    "llm.backend": "openai",
    "llm.model": "a-model",
    "llm.base_url": "http://localhost:1",
    "budget.max_cost": 1.5,
    "budget.max_time": 90.0,
    "evaluation.timing_budget": 0.5,
    "search.profile": False,
    "evaluation.jail": False,
    "memory.enabled": False,
}


def _sample(path: str) -> object:
    if path in SAMPLE_VALUES:
        return SAMPLE_VALUES[path]
    if path.startswith("llm.roles."):
        return "openai" if path.endswith(".backend") else "role-model"
    return 3  # the counts


def _nested(key: str, value: object) -> dict:
    head, _, rest = key.partition(".")
    return {head: _nested(rest, value) if rest else value}


def _field(request: OptimizeRequest, path: str) -> object:
    value: object = request
    for part in path.split("."):
        value = value[part] if isinstance(value, dict) else getattr(value, part)
    return value


@pytest.mark.parametrize("setting", [s for s in BY_PATH.values() if s.editor], ids=lambda s: s.path)
def test_each_editor_setting_reaches_the_request_under_its_one_name(setting):
    """`kernelAgent.<editor>` as VS Code nests it arrives in the worker's OptimizeRequest at
    the field path of the same row of agents/request/table.py, with its value."""
    value = _sample(setting.path)
    section = _nested(setting.editor, value)
    if setting.path.startswith("llm.") and setting.path != "llm.backend":
        section["llm"].setdefault("backend", "anthropic")  # sent only once a model is used
    loaded = load({"kernelAgent": section})
    assert not loaded.problems, loaded.problems
    job = loaded.settings.job_settings()
    assert job[setting.path] == value
    request = decode_job(json.dumps(_payload(spec(settings=job)))).request
    got = _field(request, setting.path)
    assert (str(got) if setting.path == "memory.path" else got) == value
