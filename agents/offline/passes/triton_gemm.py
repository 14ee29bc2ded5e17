"""fp32 GEMMs as Triton kernels with 3xTF32 tensor-core products and the epilogue fused.

On CUDA the fp32 SGEMM runs at its CUDA-core ceiling and torch.compile cannot beat it, while
TF32 (refused by the verifier) has about 7x the throughput. Splitting each fp32 operand into
a TF32 high part and a TF32 residual and summing three tensor-core products in fp32
(`tl.dot(..., input_precision="tf32x3")`) keeps fp32-level accuracy with a 2x-or-more margin;
fusing what follows the GEMM (bias, scale, activations, clamp, a residual add, and a row
softmax/logsumexp when the row fits one tile) saves the passes over its output. Whether the
result is accurate enough is the verifier's float64-anchored rule to judge, as always.

Each GEMM site (triton_gemm_match) becomes a call of a ModelNew method that launches one
autotuned kernel (triton_gemm_kernel, triton_gemm_epilogue); the rest of forward is
written back by fx. The module keeps Model's `__init__`, so parameter names and state_dict
keys are unchanged; float attributes (`self.scale`) and module settings are read at call
time; sizes are kernel arguments, never source text. Like the other kernel-writing passes the
result is inference-only: the kernels have no backward.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from agents import pyast
from agents.offline import source as src
from agents.offline.fx import codegen, effects, graph_edit, ops, tracing
from agents.offline.passes.base import PassError, Program, Rewrite, TuningSite
from agents.offline.passes.triton_gemm_einsum import lower_einsums
from agents.offline.passes.triton_gemm_epilogue import needs_row_tile
from agents.offline.passes.triton_gemm_kernel import describe_config, helpers, kernel, method
from agents.offline.passes.triton_gemm_match import Attr, Site, site_at
from agents.offline.passes.triton_gemm_read import LABEL, gemm_sizes
from memory.tuning import check_config, op_signature, shape_class, site_key

NOTHING = (
    "no fp32 nn.Linear, F.linear, matmul/@, mm, bmm, addmm, baddbmm or GEMM einsum in forward "
    "(Triton GEMM kernels replace those)"
)
IMPORTS = ("import math", "import triton", "import triton.language as tl")
_PREFIX = "_tgemm"


class TritonGemm:
    """fp32 GEMM + epilogue → one Triton kernel with 3xTF32 products (CUDA only)."""

    name = "triton-gemm"

    def apply(self, program: Program) -> Rewrite:
        if program.device != "cuda":
            summary = f"Triton GEMM kernels run on CUDA; this program runs on {program.device}"
            return Rewrite(None, summary, method="fx")
        return build(program)


def build(program: Program, precision: str = "tf32x3") -> Rewrite:
    """The rewrite, with tl.dot at `precision` (the pass: "tf32x3"; the accuracy bench
    renders the others to compare them)."""
    try:
        gm = tracing.trace(program)
    except tracing.TraceError as error:
        return Rewrite(None, str(error), method="fx")
    if effects.mutates_anything(gm):
        return Rewrite(None, "forward mutates tensors in place; left alone", method="fx")
    try:
        lowered, unlowered = lower_einsums(gm)
        if lowered:
            tracing.propagate(gm, program.inputs)  # the views and matmuls the einsums became
        sites, declined = _rewrite(gm, _class_names(program))
        declined = [*declined, *unlowered]
        if not sites:
            return Rewrite(None, "; ".join([NOTHING, *declined[:3]]), method="fx")
        source, tuned = _emit(program, gm, sites, precision)
    except PassError as error:
        return Rewrite(None, str(error), method="fx")
    except Exception as error:  # a bug here must cost a rewrite, never the caller's run
        summary = f"triton-gemm failed: {type(error).__name__}: {error}"
        return Rewrite(None, summary, method="fx")
    changes = [f"{done.site.what} → {done.kernel}: one Triton kernel" for done in sites]
    summary = f"{len(sites)} fp32 GEMM(s) → Triton kernels (3xTF32, epilogue fused)"
    if declined:
        summary += f"; left alone: {'; '.join(declined[:3])}"
    memos = [
        f"{t.op_signature} {t.shape_class}: {describe_config(program.tuning[_key(t)])}"
        for t in tuned
        if t.from_memory
    ]
    if memos:
        summary += f"; tile from memory ({'; '.join(memos)})"
    return Rewrite(source, summary, changes, method="fx", tuning_sites=tuned)


def _key(site: TuningSite) -> str:
    return site_key(site.op_signature, site.shape_class)


@dataclass(frozen=True)
class _Done:
    kernel: str  # the kernel's module-level name
    method: str  # the ModelNew method forward calls
    site: Site
    memory_key: tuple[str, str] | None  # (op signature, shape class); None: shapes unknown


def _rewrite(gm: torch.fx.GraphModule, taken: set[str]) -> tuple[list[_Done], list[str]]:
    """Replace one site at a time, each by a call of a new ModelNew method; the graph is
    read again after each (two sites can claim one node: an add of two GEMMs' outputs)."""
    sites: list[_Done] = []
    declined: dict[torch.fx.Node, str] = {}
    while True:
        site = None
        for node in gm.graph.nodes:
            if node in declined:
                continue
            found = site_at(gm, node)
            if isinstance(found, str):
                declined[node] = found
            elif found is not None:
                site = found
                break
        if site is None:
            return sites, list(declined.values())
        unread = _unread(site)
        if unread:
            declined[site.gemm] = unread
            continue
        name = f"_triton_gemm_{len(sites)}"
        while name in taken:
            name += "_"
        taken.add(name)
        key = _memory_key(site)  # before _replace: it reads the GEMM node's shapes
        _replace(gm, site, name)
        sites.append(_Done(f"{_PREFIX}_kernel_{len(sites)}", name, site, key))


def _memory_key(site: Site) -> tuple[str, str] | None:
    """Where memory/tuning.py keeps this site's winning tile: the op, its epilogue and dtype;
    M, N, K and a batched GEMM's batch bucketed (a "matmul" folds a's leading dims into M)."""
    sizes = gemm_sizes(site.a, site.gemm, site.form)
    dtype = ops.tensor_dtype(site.a)
    if sizes is None or dtype is None:
        return None
    batch, rows, cols, depth = sizes
    gemm = site.gemm
    kind = "linear" if gemm.op == "call_module" else ops.op_name(gemm) or str(gemm.target)
    kind = str(gemm.meta.get(LABEL, kind)).split("(")[0]
    signature = op_signature(kind, tuple(step.op for step in site.steps), str(dtype))
    return signature, shape_class(rows, cols, depth, batch)


def _remembered(program: Program, done: _Done) -> dict[str, int] | None:
    """The site's remembered config, if memory holds one that fits its tile table (a row
    reduction's tile spans N, so its config has no BLOCK_N; a plain tile needs one)."""
    if done.memory_key is None:
        return None
    config = program.tuning.get(site_key(*done.memory_key))
    if config is None:
        return None
    try:
        config = check_config(config)
    except ValueError:
        return None
    return config if ("BLOCK_N" in config) != needs_row_tile(done.site.steps) else None


def _replace(gm: torch.fx.GraphModule, site: Site, method_name: str) -> None:
    graph = gm.graph
    with graph.inserting_before(site.root):
        args = [site.a, *(_node(graph, v) for v in (site.b, *site.tensors, *site.scalars))]
        reference = _reference(gm, site, args)
        call = graph.call_function(codegen.SelfMethod(method_name, reference), tuple(args))
    call.meta["tensor_meta"] = site.root.meta.get("tensor_meta")
    graph_edit.replace_uses(site.root, call)
    name = site.root.name
    for node in reversed(site.region):  # in-place ops among them count as effects: not pruned
        graph.erase_node(node)
    effects.prune(gm)
    call._rename(name)  # forward keeps the name of the value the kernel computes


def _unread(site: Site) -> str | None:
    """Why the kernel would miss a value a replaced node reads (the matcher passes every
    operand it understands; anything else means the op was misread), else None."""
    given = {site.a, site.b, *site.tensors, *site.scalars, *site.region}
    for node in site.region:
        missing = [n for n in node.all_input_nodes if n not in given]
        if missing:
            return f"{node.name} reads {missing[0].name}, which the kernel would not be given"
    return None


def _node(graph: torch.fx.Graph, value: torch.fx.Node | Attr) -> torch.fx.Node:
    """An argument of the call: the node itself, a parameter (`self.linear.weight`), or a
    submodule's number (`self.act.negative_slope`) that forward reads at call time."""
    if isinstance(value, torch.fx.Node):
        return value
    if value.value is None:
        return graph.get_attr(value.path)
    return graph.call_function(tracing.SelfScalar(value.path, value.value), ())


def _reference(
    gm: torch.fx.GraphModule, site: Site, args: list[torch.fx.Node]
) -> torch.fx.GraphModule:
    """The replaced nodes as their own graph, taking the method's arguments: what the method
    stands for while the pass propagates shapes (eager ops, the same modules)."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for index, node in enumerate(args):
        env.setdefault(node, graph.placeholder(f"arg{index}"))
    for node in site.region:  # _unread checked that every input is an argument
        env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(env[site.root])
    return torch.fx.GraphModule(gm, graph)


def _emit(
    program: Program, gm: torch.fx.GraphModule, sites: list[_Done], precision: str
) -> tuple[str, tuple[TuningSite, ...]]:
    """The module: the program's prelude, the shared helpers, one kernel per site, and
    ModelNew with Model's __init__, forward written back by fx and one method per site; and
    the kernels' tuning sites (a remembered config replaces a site's table)."""
    effects.prune(gm)
    gm.graph.lint()
    tracing.propagate(gm, program.inputs)  # the rewritten graph must still run
    clash = sorted(n for n in _module_names(program.source) if n.startswith(_PREFIX))
    if clash:
        raise PassError(f"the module already defines {clash[0]}, a name the kernels use")
    methods: dict[str, str] = {}
    kernels: list[str] = []
    tuned: list[TuningSite] = []
    for done in sites:
        doc = f"{done.site.what}: one Triton kernel, 3xTF32 products, fp32 accumulation."
        doc = doc.replace('"', "'")
        remembered = _remembered(program, done)
        memo = " ".join(done.memory_key) if done.memory_key else ""
        kernels.append(kernel(done.kernel, done.site, doc, remembered, memo))
        if done.memory_key is not None:
            tuned.append(TuningSite(done.kernel, *done.memory_key, remembered is not None))
        methods[done.method] = method(done.method, done.kernel, done.site, doc)
    doc = "triton-gemm: " + "; ".join(done.site.what for done in sites)
    emitted = codegen.emit(program, gm, doc=doc[:300], methods=methods)
    parts = src.class_parts(emitted, "ModelNew")
    shared = helpers([done.site.steps for done in sites], precision)
    source = src.build_module(
        parts,
        parts.methods,
        doc=_class_doc(emitted),
        imports=IMPORTS,
        prelude_extra=shared + "\n\n" + "\n\n".join(kernels),
    )
    return source, tuple(tuned)


def _module_names(source: str) -> set[str]:
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def _class_names(program: Program) -> set[str]:
    """Methods and attributes of the program's class (a helper must not replace one)."""
    try:
        parts = src.class_parts(program.source, program.class_name)
    except src.SourceError:
        return set()
    names = set(parts.methods)
    module: Any = program.module
    names |= set(vars(module)) if module is not None else set()
    return names


def _class_doc(source: str) -> str:
    for node in pyast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            return ast.get_docstring(node) or ""
    return ""
