"""The skill gate: which expert skills a kernel's profile and source allow, decided before any
LLM sees them (KernelSkill's machine check: metrics → bottleneck signature → headroom tier →
allowed and forbidden methods).

It is deterministic and explains itself: every allowed skill carries the facts that let it in,
every forbidden one the rule that kept it out. The profile orders the skills but never hides
one whose `offer_when` the source meets (equality saturation: a proof that a cheaper form
exists holds whatever a measurement says).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from memory.features import CodeFeatures, extract_features
from memory.profile_metrics import ProfileMetrics
from memory.skills_library import Skill, Trigger, load_skills

HOT_SHARE = 0.05
"""An op category is hot when its ops take at least this share of the forward."""
HOT_LINE_SHARE = 0.10
HEADROOM_FACTOR = {"high": 1.0, "medium": 0.6, "low": 0.3}

VIEW_OPS = {
    "view", "reshape", "_reshape_alias", "permute", "transpose", "t", "expand", "unsqueeze",
    "squeeze", "slice", "select", "as_strided", "alias", "detach", "_unsafe_view", "empty",
    "empty_like", "empty_strided", "resolve_conj", "resolve_neg", "lift_fresh", "numpy_T",
    "split", "chunk", "unbind", "flatten", "unflatten", "view_as", "narrow",
}  # fmt: skip
CATEGORY_OF = {
    "gemm": {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addmv", "mv", "dot",
             "einsum", "_addmm_activation"},
    "conv": {"convolution", "_convolution", "conv1d", "conv2d", "conv3d", "cudnn_convolution",
             "mkldnn_convolution", "conv_transpose2d", "convolution_overrideable",
             "_convolution_mode", "_slow_conv2d_forward", "thnn_conv2d"},
    "attention": {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                  "_scaled_dot_product_efficient_attention",
                  "_scaled_dot_product_flash_attention_for_cpu",
                  "_scaled_dot_product_cudnn_attention"},
    "softmax": {"softmax", "_softmax", "log_softmax", "_log_softmax"},
    "norm": {"layer_norm", "native_layer_norm", "batch_norm", "native_batch_norm",
             "_batch_norm_impl_index", "_native_batch_norm_legit",
             "_native_batch_norm_legit_functional", "cudnn_batch_norm", "group_norm",
             "native_group_norm", "instance_norm", "rms_norm", "_fused_rms_norm"},
    "reduction": {"sum", "mean", "amax", "amin", "max", "min", "prod", "logsumexp", "var",
                  "std", "var_mean", "std_mean", "norm", "linalg_vector_norm", "argmax",
                  "argmin", "cumsum", "all", "any"},
    "pooling": {"max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices",
                "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool2d",
                "_adaptive_avg_pool2d", "adaptive_max_pool2d", "mkldnn_max_pool2d"},
    "copy": {"copy_", "clone", "contiguous", "to", "_to_copy", "cat", "stack", "pad",
             "constant_pad_nd", "repeat", "index_select", "gather"},
}  # fmt: skip


def op_category(aten_name: str) -> str | None:
    """`aten::addmm` → "gemm"; views are free and have no category (None)."""
    name = aten_name.split("::")[-1].split(".")[0]
    if name in VIEW_OPS:
        return None
    for category, names in CATEGORY_OF.items():
        if name in names:
            return category
    return "pointwise"


def headroom_tier(pct_of_peak: float) -> str:
    """KernelSkill's tiers on the limiting resource: under 60% high, 60-80% medium, else low."""
    if pct_of_peak < 60.0:
        return "high"
    if pct_of_peak <= 80.0:
        return "medium"
    return "low"


@dataclass(frozen=True)
class GateFacts:
    """What the gate knows about one kernel, derived from its profile and its source."""

    device: str | None
    bounds: frozenset[str]
    hot_categories: dict[str, float]  # category → share of the forward, for hot ones
    categories: frozenset[str]
    headroom: str | None
    pct_of_peak: float | None
    launches: int | None
    dtypes: frozenset[str]
    features: CodeFeatures

    def describe(self) -> list[str]:
        hot = ", ".join(f"{c} {s:.0%}" for c, s in self.hot_categories.items()) or "none"
        return [
            f"device: {self.device or 'unknown'}",
            f"bound: {', '.join(sorted(self.bounds)) or 'unknown'}",
            f"hot op categories: {hot}",
            f"headroom: {self.headroom or 'unknown'}"
            + (f" ({self.pct_of_peak:.0f}% of peak)" if self.pct_of_peak is not None else ""),
            f"aten ops per forward: {self.launches if self.launches is not None else 'unknown'}",
            f"code features: {', '.join(sorted(self.features.names)) or 'none'}",
        ]


def facts_from(profile: ProfileMetrics | None, source: str, device: str | None = None) -> GateFacts:
    """Derive the gate's facts; without a profile only the code features are known."""
    features = extract_features(source)
    if profile is None:
        return GateFacts(
            device, frozenset(), {}, frozenset(), None, None, None, frozenset(), features
        )
    shares: dict[str, float] = {}
    dtypes: set[str] = set()
    launches = 0
    for op in profile.ops:
        category = op_category(op.name)
        launches += op.calls
        if category is None:
            continue
        shares[category] = shares.get(category, 0.0) + op.share
        if op.dtype and op.share >= HOT_SHARE:
            dtypes.add(op.dtype.replace("torch.", ""))
    hot = {c: s for c, s in sorted(shares.items(), key=lambda kv: -kv[1]) if s >= HOT_SHARE}
    bounds = {profile.bound}
    bounds.update(line.bound for line in profile.lines if line.share >= HOT_LINE_SHARE)
    pct = profile.pct_of_peak
    return GateFacts(
        device=device or profile.device,
        bounds=frozenset(bounds),
        hot_categories=hot,
        categories=frozenset(shares),
        headroom=headroom_tier(pct),
        pct_of_peak=pct,
        launches=launches,
        dtypes=frozenset(dtypes),
        features=features,
    )


@dataclass(frozen=True)
class GateChoice:
    skill: Skill
    score: float
    why: tuple[str, ...]


@dataclass
class GateResult:
    """Allowed skills, best first, and forbidden ones, each with its reasons."""

    facts: GateFacts
    allowed: list[GateChoice] = field(default_factory=list)
    forbidden: list[GateChoice] = field(default_factory=list)
    not_triggered: int = 0

    def allowed_ids(self) -> list[str]:
        return [choice.skill.id for choice in self.allowed]

    def to_json(self) -> dict:
        def entry(choice: GateChoice) -> dict:
            return {
                "id": choice.skill.id,
                "title": choice.skill.title,
                "score": round(choice.score, 4),
                "why": list(choice.why),
            }

        return {
            "facts": self.facts.describe(),
            "allowed": [entry(c) for c in self.allowed],
            "forbidden": [entry(c) for c in self.forbidden],
            "not_triggered": self.not_triggered,
        }


def _check(trigger: Trigger, facts: GateFacts) -> tuple[bool, list[str]]:
    """Whether every condition of `trigger` holds, with one reason per condition."""
    reasons: list[str] = []

    def need(ok: bool, text: str) -> bool:
        reasons.append(("✓ " if ok else "✗ ") + text)
        return ok

    ok = True
    if trigger.devices:
        ok &= need(
            facts.device in trigger.devices, f"device {facts.device} in {_j(trigger.devices)}"
        )
    if trigger.bound:
        hit = facts.bounds & set(trigger.bound)
        ok &= need(bool(hit), f"bound {_j(facts.bounds) or 'unknown'} meets {_j(trigger.bound)}")
    if trigger.op_categories:
        hit = [c for c in trigger.op_categories if c in facts.hot_categories]
        ok &= need(
            bool(hit), f"hot ops {_j(hit or facts.hot_categories)} meet {_j(trigger.op_categories)}"
        )
    if trigger.all_op_categories:
        missing = [c for c in trigger.all_op_categories if c not in facts.categories]
        ok &= need(
            not missing,
            f"all of {_j(trigger.all_op_categories)} present"
            + (f" (missing {_j(missing)})" if missing else ""),
        )
    if trigger.headroom:
        ok &= need(
            facts.headroom in trigger.headroom,
            f"headroom {facts.headroom or 'unknown'} in {_j(trigger.headroom)}",
        )
    if trigger.code_features:
        missing = [f for f in trigger.code_features if f not in facts.features]
        ok &= need(not missing, _features_text(trigger.code_features, missing, facts, "all of"))
    if trigger.any_code_features:
        present = [f for f in trigger.any_code_features if f in facts.features]
        ok &= need(
            bool(present),
            f"one of {_j(trigger.any_code_features)} in the source"
            + (f" ({_where(present, facts)})" if present else ""),
        )
    if trigger.dtypes:
        ok &= need(
            bool(facts.dtypes & set(trigger.dtypes)),
            f"dtype {_j(facts.dtypes) or 'unknown'} in {_j(trigger.dtypes)}",
        )
    if trigger.min_launches is not None:
        ok &= need(
            facts.launches is not None and facts.launches >= trigger.min_launches,
            f"{facts.launches} aten ops per forward >= {trigger.min_launches}",
        )
    if trigger.max_launches is not None:
        ok &= need(
            facts.launches is not None and facts.launches <= trigger.max_launches,
            f"{facts.launches} aten ops per forward <= {trigger.max_launches}",
        )
    return bool(ok), reasons


def _j(values: Iterable[str]) -> str:
    return ", ".join(sorted(values))


def _where(names: Iterable[str], facts: GateFacts) -> str:
    return ", ".join(f"{n} at line {facts.features.found[n]}" for n in names)


def _features_text(wanted, missing, facts: GateFacts, label: str) -> str:
    text = f"{label} {_j(wanted)} in the source"
    if missing:
        return text + f" (missing {_j(missing)})"
    return text + f" ({_where(wanted, facts)})"


def _score(skill: Skill, facts: GateFacts) -> float:
    """Expected gain × how much of the time the skill touches × the headroom left."""
    wanted = skill.trigger.op_categories or skill.trigger.all_op_categories
    if wanted:
        touched = sum(facts.hot_categories.get(c, 0.0) for c in wanted)
        touched = max(touched, 0.05)
    else:
        touched = 1.0
    headroom = HEADROOM_FACTOR.get(facts.headroom or "high", 1.0)
    return skill.gain_estimate * min(touched, 1.0) * headroom


def source_holds(trigger: Trigger | None, facts: GateFacts) -> bool:
    """Whether the trigger's conditions on the source and the device hold; those on the
    profile are left out (unknown without one), not counted as failed."""
    if trigger is None:
        return True
    source_only = replace(
        trigger,
        bound=None,
        op_categories=None,
        all_op_categories=None,
        headroom=None,
        dtypes=None,
        min_launches=None,
        max_launches=None,
    )
    return _check(source_only, facts)[0]


def _offered(skill: Skill, facts: GateFacts) -> tuple[bool, list[str]]:
    """Whether the skill's `offer_when` holds: its source and device conditions, under which
    no profile may hide it (a pass that proves a cheaper form exists: a GEMM measured at its
    peak, against a ceiling measured under load, can still be provably unnecessary)."""
    if skill.offer_when is None:
        return False, []
    return _check(skill.offer_when, facts)


def gate(
    profile: ProfileMetrics | None,
    source: str,
    *,
    device: str | None = None,
    skills: list[Skill] | None = None,
) -> GateResult:
    """Rank the skills this kernel allows, and list the ones it forbids, with reasons."""
    facts = facts_from(profile, source, device)
    result = GateResult(facts)
    for skill in skills if skills is not None else load_skills():
        triggered, why = _check(skill.trigger, facts)
        offered, offer_why = _offered(skill, facts)
        if not triggered and not offered:
            result.not_triggered += 1
            continue
        if offered and not triggered:
            held = "; ".join(reason[2:] for reason in why if reason.startswith("✗"))
            why = [*offer_why, f"✓ offered whatever the profile says (it says: {held})"]
        if skill.forbid_when is not None and not offered:
            blocked, block_why = _check(skill.forbid_when, facts)
            if blocked:
                held = [reason[2:] for reason in block_why]
                result.forbidden.append(
                    GateChoice(skill, 0.0, tuple(["forbidden because " + "; ".join(held)]))
                )
                continue
        result.allowed.append(GateChoice(skill, _score(skill, facts), tuple(why)))
    result.allowed.sort(key=lambda choice: (-choice.score, choice.skill.id))
    result.forbidden.sort(key=lambda choice: choice.skill.id)
    return result
