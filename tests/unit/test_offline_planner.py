"""The offline planner: gate order, lineage rules, and memory that reorders what it tries."""

from __future__ import annotations

import asyncio

from agents.offline.registry import PASSES
from agents.offline.roles import OfflinePlanner, OfflineSummarizer
from agents.roles.base import PlanningContext, SkillBrief
from memory.experiences import Experience, ExperienceStore, TaskSignature
from memory.skills_library import OFFLINE_PASSES
from memory.store import MemoryStore

SIGNATURE = TaskSignature(
    op_categories=("gemm", "reduction"), shapes=((256, 1024),), dtype="float32", device_name="cpu"
)
SKILLS = [
    SkillBrief("torch-compile-fusion", "Compile", offline_pass="torch-compile"),
    SkillBrief("torch-equality-saturation", "Saturate", offline_pass="equality-saturation"),
    SkillBrief("torch-size1-reduction-noop", "Size 1", offline_pass="size1-reduction"),
    SkillBrief("cpu-vectorize", "Vectorise"),  # no offline pass: never planned
]


def context(**changes) -> PlanningContext:
    base = dict(
        task_source="ref",
        candidate_source="ref",
        candidate_speedup=1.0,
        device="cpu",
        allowed_skills=SKILLS,
        signature=SIGNATURE,
    )
    base.update(changes)
    return PlanningContext(**base)


def plans(planner: OfflinePlanner, ctx: PlanningContext) -> list[str]:
    out = []
    for slot in range(6):
        ctx.seed = slot
        plan = asyncio.run(planner.plan(ctx))
        if plan is None:
            break
        out.append(plan.method)
    return out


def test_every_skill_pass_has_an_implementation():
    assert set(OFFLINE_PASSES) == set(PASSES)


def test_without_memory_the_gate_order_holds_minus_applied_and_failed():
    planner = OfflinePlanner(None, "cpu")
    assert plans(planner, context()) == [
        "torch-compile",
        "equality-saturation",
        "size1-reduction",
    ]
    ctx = context(
        applied_methods=["equality-saturation"],
        avoid_plans=["Size 1 (offline pass size1-reduction) [size1-reduction]"],
    )
    assert plans(planner, ctx) == ["torch-compile"]


def test_nothing_follows_a_terminal_pass():
    planner = OfflinePlanner(None, "cpu")
    assert plans(planner, context(applied_methods=["torch-compile"])) == []


def test_device_only_passes_are_not_planned_elsewhere():
    skills = [SkillBrief("torch-cuda-graphs", "Graphs", offline_pass="cuda-graphs")]
    assert plans(OfflinePlanner(None, "cpu"), context(allowed_skills=skills)) == []
    cuda = context(allowed_skills=skills, device="cuda")
    assert plans(OfflinePlanner(None, "cuda"), cuda) == ["cuda-graphs"]


def _experience(pass_name: str, speedup: float) -> Experience:
    return Experience(
        signature=SIGNATURE,
        slow_source=f"slow {pass_name} {speedup}",
        fast_source=f"fast {pass_name} {speedup}",
        speedup=speedup,
        plan=f"Some title (offline pass {pass_name}) [{pass_name}]",
        kind="positive" if speedup > 1 else "negative",
    )


def test_memory_moves_a_pass_that_paid_ahead_and_one_that_hurt_behind(tmp_path):
    with MemoryStore(tmp_path / "m.sqlite3") as store:
        experiences = ExperienceStore(store)
        experiences.add(_experience("size1-reduction", 3.0))
        experiences.add(_experience("torch-compile", 0.5))
        planner = OfflinePlanner(experiences, "cpu")
        assert plans(planner, context()) == [
            "size1-reduction",
            "equality-saturation",
            "torch-compile",
        ]
        plan = asyncio.run(planner.plan(context(seed=0)))
        assert "3.00x on 1 similar task" in plan.details


def test_the_offline_summary_states_the_measurement():
    summarizer = OfflineSummarizer("cpu")
    good = asyncio.run(summarizer.summarize("s", "f", 2.5, "Fold [equality-saturation]", False))
    assert "2.50x" in good.lesson and "Fold" in good.title
    bad = asyncio.run(summarizer.summarize("s", "f", 1.5, "Compile [torch-compile]", True))
    assert "slower" in bad.lesson and "do not" in bad.lesson


def test_without_a_profile_every_offline_pass_is_planned_rewrites_before_compilers():
    planner = OfflinePlanner(None, "cpu")
    forbidden = [SkillBrief("torch-channels-last", "NHWC", offline_pass="channels-last")]
    ungated = context(allowed_skills=[], forbidden_skills=forbidden, gated=False)
    methods = []
    for slot in range(20):
        ungated.seed = slot
        plan = asyncio.run(planner.plan(ungated))
        if plan is None:
            break
        methods.append(plan.method)
    assert "equality-saturation" in methods and "torch-compile" in methods
    assert "channels-last" not in methods  # the gate's "forbidden" still holds
    assert "cuda-graphs" not in methods  # a CUDA-only pass, on the CPU
    first_compiler = min(methods.index(m) for m in ("torch-compile", "cpp-elementwise"))
    assert all(m not in ("torch-compile", "cpp-elementwise") for m in methods[:first_compiler])
    assert first_compiler >= 3
    # With a profile, the gate's word is final: nothing it did not allow is planned.
    assert plans(planner, context(allowed_skills=[], gated=True)) == []


def test_without_a_profile_the_skill_that_fits_the_source_names_a_shared_pass():
    """Two skills compile (a convolution's epilogue, pointwise/reduction fusion): without a
    profile, a layer norm's plan must not be titled as a convolution epilogue, while a conv
    block's still is."""
    from pathlib import Path

    bench = Path(__file__).parents[2] / "bench" / "problems"
    planner = OfflinePlanner(None, "cuda")

    def compile_skill(problem: str) -> str:
        source = next(bench.glob(f"{problem}_*.py")).read_text()
        ungated = context(
            task_source=source,
            candidate_source=source,
            device="cuda",
            allowed_skills=[],
            gated=False,
        )
        return next(r.skill.id for r in planner.rank(ungated) if r.name == "torch-compile")

    assert compile_skill("18") == "torch-compile-fusion"
    assert compile_skill("21") == "torch-compile-conv-epilogue"
