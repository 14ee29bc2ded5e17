"""The skill library: curated optimisation methods read from `memory/skills/*.toml`.

Each skill says *when* it applies (a trigger the gate checks against profiler facts and code
features) and *what to do* (strategy, pitfalls, forbidden patterns). Loading is strict: the
gate trusts these files blindly, so a typo must fail loudly here, with one line naming the
file, the skill and the field, rather than silently widen or narrow a trigger.
See `memory/skills/README.md` for the format.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from memory.devices import DEVICES

SKILLS_DIR = Path(__file__).resolve().parent / "skills"
_ROOT = SKILLS_DIR.parent.parent

TARGETS = ("torch", "cpu-cpp", "cuda", "triton")
BOUNDS = ("memory", "compute", "overhead")
OP_CATEGORIES = (
    "gemm",
    "conv",
    "reduction",
    "pointwise",
    "attention",
    "norm",
    "softmax",
    "pooling",
    "copy",
)
HEADROOM_TIERS = ("high", "medium", "low")
CODE_FEATURES = (
    "loops",
    "reductions",
    "manual_softmax",
    "manual_norm",
    "reduction_after_gemm",
    "scale_after_linear",
    "size1_reduction_candidate",
    "load_inline_cuda",
    "load_inline_cpp",
    "triton_jit",
    "host_sync",
    "contiguous_calls",
    "transpose_calls",
    "elementwise_chain",
    "python_loop_over_tensor",
    "dropout",
    "batchnorm",
    "conv",
    "linear",
    "matmul",
    "softmax_call",
    "layernorm_call",
    "sdpa",
    "manual_attention",
)
DTYPES = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "complex64",
    "complex128",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)
"""torch dtype names without the `torch.` prefix, as the profiler writes them."""
OFFLINE_PASSES = (
    "equality-saturation",
    "size1-reduction",
    "library-substitution",
    "channels-last",
    "torch-compile",
    "compile-epilogue",
    "cudnn-benchmark",
    "cuda-graphs",
    "cpp-elementwise",
    "triton-gemm",
)

_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_LIST_KEYS: dict[str, tuple[str, ...]] = {
    "bound": BOUNDS,
    "op_categories": OP_CATEGORIES,
    "all_op_categories": OP_CATEGORIES,
    "headroom": HEADROOM_TIERS,
    "code_features": CODE_FEATURES,
    "any_code_features": CODE_FEATURES,
    "devices": DEVICES,
    "dtypes": DTYPES,
}
_NOUNS = {
    "bound": "bound",
    "op_categories": "op category",
    "all_op_categories": "op category",
    "headroom": "headroom tier",
    "code_features": "code feature",
    "any_code_features": "code feature",
    "devices": "device",
    "dtypes": "dtype",
}
_INT_KEYS = ("min_launches", "max_launches")


@dataclass(frozen=True)
class Trigger:
    """Conditions on the profile and the source; an absent (None) key holds always.

    Lists are "any of" except `all_op_categories` and `code_features`, which need every item.
    The same type describes `forbid_when`, where the skill is forbidden if all present keys hold.
    """

    bound: tuple[str, ...] | None = None
    op_categories: tuple[str, ...] | None = None
    all_op_categories: tuple[str, ...] | None = None
    headroom: tuple[str, ...] | None = None
    code_features: tuple[str, ...] | None = None
    any_code_features: tuple[str, ...] | None = None
    devices: tuple[str, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    min_launches: int | None = None
    max_launches: int | None = None

    def present(self) -> dict[str, tuple[str, ...] | int]:
        """The keys that constrain anything, in declaration order (for the gate and its reasons)."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }


TRIGGER_KEYS = tuple(f.name for f in fields(Trigger))


@dataclass(frozen=True)
class Skill:
    """One method: when it applies (trigger / forbid_when) and how to apply it safely."""

    id: str
    title: str
    targets: tuple[str, ...]
    strategy: str
    pitfalls: tuple[str, ...]
    forbidden_patterns: tuple[str, ...]
    expected_gain: str
    gain_estimate: float
    offline_pass: str | None
    trigger: Trigger
    forbid_when: Trigger | None
    source: str
    offer_when: Trigger | None = None
    """Conditions on the source and the device only: where they hold, the gate allows the
    skill whatever the profile says (the profile then only orders it); for a pass that proves
    a cheaper form exists, which no measurement can rule out."""


_REQUIRED = (
    "id",
    "title",
    "targets",
    "strategy",
    "pitfalls",
    "forbidden_patterns",
    "expected_gain",
    "gain_estimate",
)
_OPTIONAL = ("offline_pass", "trigger", "forbid_when", "offer_when")
OFFER_KEYS = ("code_features", "any_code_features", "devices")
"""What `offer_when` may test: what the source and the device say, never the profile."""
_SKILL_KEYS = _REQUIRED + _OPTIONAL


class SkillError(Exception):
    """A skill file that cannot be used; the message is one line naming file, skill and field.

    `skill` is the quoted id, or `#N` (1-based, within the file) when the id is missing.
    """

    def __init__(self, file: str, message: str, skill: str | None = None, field: str | None = None):
        parts = [file]
        if skill is not None:
            parts.append(f"skill {skill}")
        if field is not None:
            parts.append(f"field {field!r}")
        parts.append(" ".join(message.split()))
        super().__init__(": ".join(parts))
        self.file, self.skill, self.field = file, skill, field


_Fail = Callable[[str, str], SkillError]
"""Builds the error for (field, message) of the skill being parsed."""


def load_skills(folder: Path | None = None) -> list[Skill]:
    """Every skill in `folder/*.toml` (default: the shipped library), validated, sorted by id."""
    if folder is None:
        return list(_load_default())
    return _load_folder(Path(folder))


@functools.cache
def _load_default() -> tuple[Skill, ...]:
    # Only the shipped folder is cached: tests and users pointing elsewhere see fresh files.
    return tuple(_load_folder(SKILLS_DIR))


def skill_to_json(skill: Skill) -> dict[str, Any]:
    """A plain dict for CLI/JSON output; absent trigger keys are left out, tuples become lists."""

    def trigger(t: Trigger | None) -> dict[str, Any] | None:
        if t is None:
            return None
        return {k: list(v) if isinstance(v, tuple) else v for k, v in t.present().items()}

    return {
        "id": skill.id,
        "title": skill.title,
        "targets": list(skill.targets),
        "strategy": skill.strategy,
        "pitfalls": list(skill.pitfalls),
        "forbidden_patterns": list(skill.forbidden_patterns),
        "expected_gain": skill.expected_gain,
        "gain_estimate": skill.gain_estimate,
        "offline_pass": skill.offline_pass,
        "trigger": trigger(skill.trigger),
        "forbid_when": trigger(skill.forbid_when),
        "offer_when": trigger(skill.offer_when),
        "source": skill.source,
    }


def _display(path: Path) -> str:
    """Paths inside the project are shown relative to its root, so messages stay short."""
    resolved = path.resolve()
    return str(resolved.relative_to(_ROOT)) if resolved.is_relative_to(_ROOT) else str(path)


def _load_folder(folder: Path) -> list[Skill]:
    if not folder.is_dir():
        raise SkillError(_display(folder), "no such folder")
    skills: list[Skill] = []
    first_seen: dict[str, str] = {}
    for path in sorted(folder.glob("*.toml")):
        for skill in _load_file(path):
            if skill.id in first_seen:
                raise SkillError(
                    skill.source,
                    f"duplicate id {skill.id!r} (first in {first_seen[skill.id]})",
                    repr(skill.id),
                    "id",
                )
            first_seen[skill.id] = skill.source
            skills.append(skill)
    return sorted(skills, key=lambda s: s.id)


def _load_file(path: Path) -> list[Skill]:
    file = _display(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise SkillError(file, f"cannot read: {error}") from None
    except tomllib.TOMLDecodeError as error:
        # tomllib puts "(at line N, column M)" in the message.
        raise SkillError(file, f"TOML syntax error: {error}") from None
    extra = sorted(set(data) - {"skill"})
    if extra:
        raise SkillError(file, f"unknown top-level key {extra[0]!r} (only [[skill]] tables)")
    tables = data.get("skill", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise SkillError(file, "'skill' must be an array of tables, written [[skill]]")
    return [_parse_skill(file, index, table) for index, table in enumerate(tables, start=1)]


def _parse_skill(file: str, index: int, table: dict[str, Any]) -> Skill:
    raw_id = table.get("id")
    name = repr(raw_id) if isinstance(raw_id, str) and raw_id else f"#{index}"

    def fail(field: str, message: str) -> SkillError:
        return SkillError(file, message, name, field)

    for key in table:
        if key not in _SKILL_KEYS:
            raise fail(key, f"unknown field{_suggest(key, _SKILL_KEYS)}")
    for key in _REQUIRED:
        if key not in table:
            raise fail(key, "required field is missing")
    skill_id = _text(fail, table, "id")
    if not _ID.fullmatch(skill_id):
        raise fail("id", f"{skill_id!r} must be lowercase letters, digits and '-'")
    targets = _texts(fail, table, "targets")
    if not targets:
        raise fail("targets", "must name at least one target")
    _check_allowed(fail, "targets", "target", targets, TARGETS)
    gain = _gain_estimate(fail, table["gain_estimate"])
    offline_pass = table.get("offline_pass")
    if offline_pass is not None:
        if not isinstance(offline_pass, str):
            raise fail("offline_pass", f"must be a string, got {_type(offline_pass)}")
        _check_allowed(fail, "offline_pass", "pass", (offline_pass,), OFFLINE_PASSES)
    trigger = _parse_trigger(fail, "trigger", table.get("trigger", {}))
    forbid_when, offer_when = _forbid_when(fail, table), _offer_when(fail, table)
    return Skill(
        id=skill_id,
        title=_text(fail, table, "title", one_line=True),
        targets=targets,
        strategy=_text(fail, table, "strategy"),
        pitfalls=_texts(fail, table, "pitfalls"),
        forbidden_patterns=_texts(fail, table, "forbidden_patterns"),
        expected_gain=_text(fail, table, "expected_gain"),
        gain_estimate=gain,
        offline_pass=offline_pass,
        trigger=trigger,
        forbid_when=forbid_when,
        source=file,
        offer_when=offer_when,
    )


def _text(fail: _Fail, table: dict[str, Any], field: str, one_line: bool = False) -> str:
    value = table[field]
    if not isinstance(value, str):
        raise fail(field, f"must be a string, got {_type(value)}")
    if not value.strip():
        raise fail(field, "must not be empty")
    if one_line and "\n" in value.strip():
        raise fail(field, "must be one line")
    return value.strip()


def _texts(fail: _Fail, table: dict[str, Any], field: str) -> tuple[str, ...]:
    value = table[field]
    if not isinstance(value, list):
        raise fail(field, f"must be a list of strings, got {_type(value)}")
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise fail(field, f"items must be non-empty strings, got {item!r}")
    return tuple(item.strip() for item in value)


def _gain_estimate(fail: _Fail, gain: Any) -> float:
    if isinstance(gain, bool) or not isinstance(gain, int | float):
        raise fail("gain_estimate", f"must be a number, got {_type(gain)}")
    if not math.isfinite(gain) or gain <= 0:
        raise fail("gain_estimate", f"must be a finite number > 0, got {gain}")
    return float(gain)


def _forbid_when(fail: _Fail, table: dict[str, Any]) -> Trigger | None:
    if "forbid_when" not in table:
        return None
    forbid_when = _parse_trigger(fail, "forbid_when", table["forbid_when"])
    if not forbid_when.present():
        # An empty table would hold always and forbid the skill everywhere.
        raise fail("forbid_when", "must set at least one key (or be left out)")
    return forbid_when


def _offer_when(fail: _Fail, table: dict[str, Any]) -> Trigger | None:
    """Conditions under which no profile may hide the skill: on the source and device only."""
    if "offer_when" not in table:
        return None
    offer_when = _parse_trigger(fail, "offer_when", table["offer_when"])
    if not offer_when.present():
        raise fail("offer_when", "must set at least one key (or be left out)")
    for key in offer_when.present():
        if key not in OFFER_KEYS:
            raise fail(
                f"offer_when.{key}",
                f"tests the profile; offer_when may test only {', '.join(OFFER_KEYS)}",
            )
    return offer_when


def _parse_trigger(fail: _Fail, section: str, value: Any) -> Trigger:
    if not isinstance(value, dict):
        raise fail(section, f"must be a table, written [skill.{section}], got {_type(value)}")
    parsed: dict[str, Any] = {}
    for key, item in value.items():
        field = f"{section}.{key}"
        if key in _LIST_KEYS:
            if not isinstance(item, list) or not all(isinstance(x, str) for x in item):
                raise fail(field, f"must be a list of strings, got {item!r}")
            if not item:
                # "At least one of []" never holds; leaving the key out is what was meant.
                raise fail(field, "must not be empty (leave the key out to match always)")
            _check_allowed(fail, field, _NOUNS[key], item, _LIST_KEYS[key])
            parsed[key] = tuple(item)
        elif key in _INT_KEYS:
            if isinstance(item, bool) or not isinstance(item, int):
                raise fail(field, f"must be an integer, got {_type(item)}")
            if item < 0:
                raise fail(field, f"must be >= 0, got {item}")
            parsed[key] = item
        else:
            raise fail(field, f"unknown key{_suggest(key, TRIGGER_KEYS)}")
    low, high = parsed.get("min_launches"), parsed.get("max_launches")
    if low is not None and high is not None and low > high:
        raise fail(f"{section}.min_launches", f"min_launches {low} > max_launches {high}")
    return Trigger(**parsed)


def _check_allowed(
    fail: _Fail, field: str, noun: str, values: Iterable[str], allowed: tuple[str, ...]
) -> None:
    seen: set[str] = set()
    for value in values:
        if value not in allowed:
            raise fail(field, f"unknown {noun} {value!r} (allowed: {', '.join(allowed)})")
        if value in seen:
            raise fail(field, f"{value!r} is listed twice")
        seen.add(value)


def _suggest(key: str, allowed: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f" (allowed: {', '.join(allowed)}){hint}"


def _type(value: Any) -> str:
    return type(value).__name__
