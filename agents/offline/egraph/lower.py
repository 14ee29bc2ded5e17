"""From a traced forward (torch.fx) to e-graph terms, and the facts the rules may use.

An fx node whose op the term language knows, with arguments it can read (single int dims,
Python scalars, default options), becomes that term; every other node becomes a `leaf`, kept
as it is. Parameters and buffers are leaves whose sizes are known by construction; inputs are
leaves whose sizes are not (only their rank). Every leaf's example shape goes into the
cost-only `crank/csize` facts.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F
from egglog import EGraph, i64, set_, union

from agents.offline.egraph import lower_ops
from agents.offline.egraph.analysis import SHAPE_KEEPING_UNARY
from agents.offline.egraph.terms import T, crank, csize, groups, rank, size
from agents.offline.fx import effects, ops, tracing

Node = torch.fx.Node

UNARY_FUNCTIONS = {
    torch.relu: "relu",
    F.relu: "relu",
    torch.sigmoid: "sigmoid",
    F.sigmoid: "sigmoid",
    torch.tanh: "tanh",
    F.tanh: "tanh",
    F.gelu: "gelu",
    F.silu: "silu",
    torch.exp: "exp",
    torch.log: "log",
    torch.neg: "neg",
    operator.neg: "neg",
    torch.abs: "abs",
    torch.sqrt: "sqrt",
    F.softplus: "softplus",
    F.elu: "elu",
    F.leaky_relu: "leaky_relu",
    F.hardtanh: "hardtanh",
    F.mish: "mish",
    torch.erf: "erf",
}
UNARY_METHODS = {name: name for name in SHAPE_KEEPING_UNARY if name not in ("gelu", "silu")}
UNARY_MODULES = {
    nn.ReLU: "relu",
    nn.Sigmoid: "sigmoid",
    nn.Tanh: "tanh",
    nn.GELU: "gelu",
    nn.SiLU: "silu",
    nn.Softplus: "softplus",
    nn.ELU: "elu",
    nn.LeakyReLU: "leaky_relu",
    nn.Hardtanh: "hardtanh",
    nn.Mish: "mish",
}
BINARY = {
    operator.add: "add",
    torch.add: "add",
    operator.sub: "sub",
    torch.sub: "sub",
    operator.mul: "mul",
    torch.mul: "mul",
    operator.truediv: "div",
    torch.div: "div",
    operator.pow: "pow",
    torch.pow: "pow",
    torch.maximum: "maximum",
    torch.minimum: "minimum",
}
BINARY_METHODS = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "pow": "pow"}
REDUCTIONS = {"sum", "mean", "amax", "amin", "logsumexp"}
NORM_MODULES = (nn.GroupNorm, nn.LayerNorm, nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d)
CONV_MODULES = {nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3}


@dataclass(frozen=True)
class ConvSpec:
    dims: int
    stride: Any
    padding: Any
    dilation: Any
    groups: int


@dataclass(frozen=True)
class Anchor:
    """An op kept where it is whose tensor arguments may take new forms: the node, those
    arguments, and their terms at that point of the graph."""

    node: Node
    arguments: list[Node]
    terms: list[Any]


@dataclass
class Lowered:
    """The terms of a graph: one per node (a leaf where no term applies), the leaves' fx
    nodes by index, the conv and norm settings by spec index, and the output terms.

    `stale` holds the nodes whose tensor an in-place op writes after they are computed: at
    the end of the graph, where new code is written, such a node no longer holds the value
    its term stands for, so the emitter never reads it there."""

    gm: torch.fx.GraphModule
    terms: dict[Node, Any] = field(default_factory=dict)
    leaves: list[Any] = field(default_factory=list)  # index -> fx node (or attribute path)
    convs: list[ConvSpec] = field(default_factory=list)
    norms: list[Node] = field(default_factory=list)  # the original norm call, replayed
    output: Any = None  # the term of a single tensor output
    outputs: list[Any] = field(default_factory=list)  # a term per output (None: not a node)
    facts: list[Any] = field(default_factory=list)
    inputs: list[Node] = field(default_factory=list)
    stale: set[Node] = field(default_factory=set)
    free: set[int] = field(default_factory=set)  # leaves computed anyway (_pin, _anchor)
    anchors: list[Anchor] = field(default_factory=list)
    written: dict[Node, Node] = field(default_factory=dict)  # node -> the tensor it is
    made: dict[Node, Any] = field(default_factory=dict)  # a written tensor -> its own term
    pinned: set[str] = field(default_factory=set)  # the terms those leaves stand for
    unsupported: str | None = None  # why no rewrite may be written, if any

    def leaf(self, node: Any, known_sizes: bool) -> Any:
        """A leaf for `node` (an fx node, or a parameter's attribute path)."""
        index = len(self.leaves)
        self.leaves.append(node)
        term = T.leaf(index)
        self.shape_facts(term, _shape_of(self.gm, node), known_sizes)
        return term

    def shape_facts(self, term: Any, shape: tuple[int, ...] | None, known_sizes: bool) -> None:
        """Its rank, its example sizes (for costs), its sizes where known by construction."""
        if shape is None:
            return
        self.facts.append(set_(crank(term)).to(i64(len(shape))))
        self.facts.append(set_(rank(term)).to(i64(len(shape))))
        for dim, extent in enumerate(shape):
            self.facts.append(set_(csize(term, dim)).to(i64(extent)))
            if known_sizes:
                self.facts.append(set_(size(term, dim)).to(i64(extent)))


def _shape_of(gm: torch.fx.GraphModule, node: Any) -> tuple[int, ...] | None:
    if isinstance(node, str):
        value = gm.get_parameter(node) if _is_param(gm, node) else gm.get_buffer(node)
        return tuple(value.shape)
    return ops.tensor_shape(node)


def _is_param(gm: torch.fx.GraphModule, target: str) -> bool:
    try:
        gm.get_parameter(target)
    except AttributeError:
        return False
    return True


def lower(gm: torch.fx.GraphModule) -> Lowered:
    """Terms for every node of `gm` (whose tensor metadata is propagated)."""
    low = Lowered(gm)
    same_tensor: dict[Node, list[Node]] = {}  # a written tensor -> the nodes that are it
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            low.terms[node] = low.leaf(node, known_sizes=False)
            if ops.tensor_shape(node) is not None:
                low.inputs.append(node)
        elif node.op == "get_attr":
            low.terms[node] = low.leaf(node, known_sizes=True)
        elif node.op == "output":
            _outputs(low, node.args[0])
        elif (
            tracing.self_scalar(node) is not None
        ):  # a float read from self: a scalar, value unknown
            term = low.leaf(node, known_sizes=False)
            low.facts += [set_(rank(term)).to(i64(0)), set_(crank(term)).to(i64(0))]
            low.terms[node] = term
        else:
            term = _term(low, node)
            if term is None:
                term = _opaque(low, node)
            if term is None:
                term = low.leaf(node, known_sizes=False)
                _anchor(low, node)
            low.terms[node] = term
            if effects.is_mutating(gm, node):
                _written(low, node, same_tensor)
    _pin(low)
    return low


def _pin(low: Lowered) -> None:
    """Nodes the rewritten forward computes whatever it finds: an op kept as a leaf that
    must run (a module of the user's, an in-place write no rule knows) and everything it
    reads, but for what is rewritten in place (Anchor: the arguments of BatchNorm or a random
    op, of the tensor an in-place write writes). Each gets a free leaf in its e-class (its
    own node, already computed), so the cost model neither counts it twice nor prefers
    recomputing it another way. (An in-place op lowered as a term, such as
    ReLU(inplace=True), is no root: once nothing reads it, the write is dropped.)"""
    gm = low.gm
    anchored = {anchor.node for anchor in low.anchors}
    roots, seen = [], set()
    for node in gm.graph.nodes:
        if not node.op.startswith("call_") or node in anchored or not effects.has_effects(gm, node):
            continue
        if not str(low.terms.get(node)).startswith("T.leaf("):
            continue
        if node not in low.written:
            roots.append(node)
            continue
        # An in-place write: the tensor it writes stays where it is (an Anchor, unless an
        # op no rule knows made it); what else it reads is computed anyway.
        base = low.written[node]
        same = {n for n, b in low.written.items() if b is base and (n is not base or n in anchored)}
        seen.add(node)
        roots += [a for a in node.all_input_nodes if a not in same]
    while roots:
        node = roots.pop()
        if node not in seen:
            seen.add(node)
            roots.extend(node.all_input_nodes)
    for node in gm.graph.nodes:
        if node not in seen or not node.op.startswith("call_") or node in low.stale:
            continue
        term = low.terms.get(node)
        if term is None or tracing.self_scalar(node) is not None:
            continue
        if str(term).startswith("T.leaf("):
            low.free.add(low.leaves.index(node))
            continue
        leaf = low.leaf(node, known_sizes=False)
        low.free.add(len(low.leaves) - 1)
        low.facts.append(union(term).with_(leaf))
        low.pinned.add(str(term))


def _opaque(low: Lowered, node: Node) -> Any:
    """An op no rule knows that only computes a float tensor from its tensor arguments
    (pooling, indexing, a view, cat, a module without buffers): `T.opaque`, the same call on
    its arguments' terms, so that the rules still work inside them. An op that must run as
    written (an in-place write, a module with buffers, a random op) stays a leaf."""
    dtype = ops.tensor_dtype(node)
    if dtype is None or not dtype.is_floating_point or ops.tensor_shape(node) is None:
        return None
    if not node.op.startswith("call_") or effects.has_effects(low.gm, node):
        return None
    tensors = lower_ops.tensor_arguments(node)
    if not tensors or not all(a in low.terms for a in tensors):
        return None
    arguments = T.none()
    for argument in reversed(tensors):
        arguments = T.cons(low.terms[argument], arguments)
    low.leaves.append(node)  # by index, as a leaf: the node to copy, its example shape
    term = T.opaque(len(low.leaves) - 1, arguments)
    low.shape_facts(term, ops.tensor_shape(node), known_sizes=False)
    return term


def _anchor(low: Lowered, node: Node) -> None:
    """An op kept as a leaf that writes none of its inputs (one that must run where it is,
    such as BatchNorm or a random op, or one whose result no term holds, such as a size or a
    tuple): it stays where it is and its tensor arguments are rewritten in place (Anchor).
    One that must run is computed anyway: its leaf is free."""
    if not node.op.startswith("call_") or effects.is_mutating(low.gm, node):
        return
    module = ops.call_module(low.gm, node)
    if module is not None and not type(module).__module__.startswith("torch.nn."):
        return  # a module of the user's: it may write its input in place
    if _anchor_arguments(low, node) and effects.has_effects(low.gm, node):
        low.free.add(len(low.leaves) - 1)


def _anchor_arguments(low: Lowered, node: Node) -> bool:
    """Let the node's tensor arguments take new forms, the node staying where it is."""
    tensors = lower_ops.tensor_arguments(node)
    if not tensors or not all(a in low.terms for a in tensors):
        return False
    low.anchors.append(Anchor(node, tensors, [low.terms[a] for a in tensors]))
    return True


def _outputs(low: Lowered, value: Any) -> None:
    """One tensor, or a flat tuple or list of values (terms for the nodes among them)."""
    if isinstance(value, Node):
        low.output = low.terms.get(value)
        low.outputs = [low.output]
    elif isinstance(value, tuple | list):
        low.outputs = [low.terms.get(v) if isinstance(v, Node) else None for v in value]


def _written(low: Lowered, node: Node, same_tensor: dict[Node, list[Node]]) -> None:
    """An in-place write (a private one: effects.mutates_anything let the graph through). Its
    target, and every earlier node that is the same tensor (earlier in-place ops on it), is
    stale from here on; readers after the write read the written value, which is the write's
    own term (an in-place op returns its target)."""
    target = node.args[0] if node.args else None
    if not isinstance(target, Node) or ops.tensor_meta(node) is None:
        low.unsupported = f"{node.name} writes in place and returns no tensor"
        return
    base = next((b for b, nodes in same_tensor.items() if target in nodes), target)
    made = low.made.setdefault(base, low.terms[base])  # its own term, before any write
    anchored = any(anchor.node is base for anchor in low.anchors)
    kept = str(low.terms[node]).startswith("T.leaf(")  # a write no rule knows: it stays
    if kept and not anchored and not str(made).startswith("T.leaf("):
        _anchor_arguments(low, base)  # so the tensor it writes is made where it is, as it is
    nodes = same_tensor.setdefault(base, [base])
    for earlier in nodes:
        low.stale.add(earlier)
        low.terms[earlier] = low.terms[node]
        low.written[earlier] = base
    nodes.append(node)
    low.written[node] = base


def register(egraph: EGraph, low: Lowered) -> None:
    egraph.register(*low.facts)
    for index, spec in enumerate(low.convs):
        egraph.register(set_(groups(index)).to(i64(spec.groups)))


def _value(low: Lowered, value: Any) -> Any:
    """The term of an argument: a node's term, a Python number as a constant, else None."""
    if isinstance(value, Node):  # a self scalar's term is a rank-0 leaf, value unknown
        return low.terms.get(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return T.const(float(value))
    return None


def _tensor(low: Lowered, value: Any) -> Any:
    return low.terms.get(value) if isinstance(value, Node) and ops.tensor_shape(value) else None


def _dim(node: Any, dim: Any) -> int | None:
    shape = ops.tensor_shape(node)
    if shape is None or isinstance(dim, bool) or not isinstance(dim, int):
        return None
    if not -len(shape) <= dim < max(len(shape), 1):
        return None
    return dim % len(shape) if shape else None


def _term(low: Lowered, node: Node) -> Any:
    dtype = ops.tensor_dtype(node)
    if ops.tensor_shape(node) is None or dtype is None or not dtype.is_floating_point:
        return None  # tuples, scalars, sizes, integer tensors: kept as they are
    if not _one_dtype(node, dtype):
        return None  # a promoting op: the rules assume a term has its operands' dtype
    kept = _kept_or_moved(low, node)
    if kept is not None:
        return kept
    if node.op == "call_function" and node.target in (getattr, operator.getitem):
        return _max_values(low, node)
    if node.op == "call_function" and node.target is torch.tensor:
        return _scalar_tensor(node)
    if node.op == "call_module":
        return _module_term(low, node)
    name = ops.op_name(node)
    target = node.target
    if node.op == "call_function" and target in UNARY_FUNCTIONS and _only_input(node):
        a = _tensor(low, node.args[0])
        return T.un(UNARY_FUNCTIONS[target], a) if a is not None else None
    if node.op == "call_method" and target in UNARY_METHODS and len(node.args) == 1:
        if node.kwargs:
            return None
        a = _tensor(low, node.args[0])
        return T.un(UNARY_METHODS[target], a) if a is not None else None
    if target in (torch.min, torch.max) and len(node.args) == 2 and not node.kwargs:
        other = node.args[1]
        if isinstance(other, Node) and ops.tensor_shape(other) is not None:
            target = torch.minimum if target is torch.min else torch.maximum
    binary = BINARY.get(target) if node.op == "call_function" else BINARY_METHODS.get(target)
    if binary is not None and len(node.args) == 2 and not node.kwargs:
        a, b = (_value(low, arg) for arg in node.args)
        if a is None or b is None:
            return None
        if binary in ("maximum", "minimum") and not all(isinstance(x, Node) for x in node.args):
            return None
        return T.bin(binary, a, b)
    if name in ("clamp", "clip"):
        return _clamp(low, node)
    if name in REDUCTIONS:
        return _reduction(low, node, name)
    if name in ("softmax", "log_softmax"):
        args = ops.arguments(node, ("input", "dim", "_stacklevel", "dtype"))
        if not args or set(args) - {"input", "dim", "_stacklevel"}:
            return None
        a, dim = _tensor(low, args.get("input")), _dim(args.get("input"), args.get("dim"))
        return T.soft(name, a, dim) if a is not None and dim is not None else None
    if name == "linear":
        args = ops.arguments(node, ("input", "weight", "bias"))
        if not args or set(args) - {"input", "weight", "bias"}:
            return None
        x, w = _tensor(low, args.get("input")), _tensor(low, args.get("weight"))
        b = _tensor(low, args.get("bias")) if args.get("bias") is not None else T.none()
        return T.linear(x, w, b) if None not in (x, w, b) else None
    if name in ("matmul", "mm") and node.op == "call_function" and len(node.args) == 2:
        a, b = (_tensor(low, arg) for arg in node.args)
        return T.matmul(a, b) if a is not None and b is not None and not node.kwargs else None
    if name == "diag" and len(node.args) == 1 and not node.kwargs:
        v = _tensor(low, node.args[0])
        return T.diag(v) if v is not None and len(ops.tensor_shape(node.args[0])) == 1 else None
    if name == "unsqueeze" and len(node.args) == 2 and not node.kwargs:
        a, dim = _tensor(low, node.args[0]), node.args[1]
        rank_out = len(ops.tensor_shape(node))
        if a is None or not isinstance(dim, int) or not -rank_out <= dim < rank_out:
            return None
        return T.unsqueeze(a, dim % rank_out)
    return None


def _one_dtype(node: Node, dtype: torch.dtype) -> bool:
    """Every tensor operand has the result's dtype."""
    operands = [*node.args, *node.kwargs.values()]
    return all(ops.tensor_dtype(a) in (None, dtype) for a in operands if isinstance(a, Node))


def _kept_or_moved(low: Lowered, node: Node) -> Any:
    """No-ops (their own term, which a rule removes), permutations, squeezes of a dim made
    1, and addmm (a scaled linear map of the transposed matrix)."""
    found = lower_ops.no_op(low.gm, node)
    if found is not None:
        a = _tensor(low, found[1])
        return T.un(found[0], a) if a is not None else None
    permuted = lower_ops.permutation(node)
    if permuted is not None:
        a = _tensor(low, permuted[0])
        return lower_ops.permute_term(a, permuted[1]) if a is not None else None
    squeezed = lower_ops.squeeze_of_made_dim(node)
    if squeezed is not None:
        a = _tensor(low, squeezed[0])
        return T.squeeze(a, squeezed[1]) if a is not None else None
    addmm = lower_ops.addmm_parts(node)
    if addmm is None:
        return None
    bias, x, matrix, beta, alpha = addmm
    b, xt, m = _tensor(low, bias), _tensor(low, x), _tensor(low, matrix)
    if None in (b, xt, m) or beta == 0:  # beta=0: the input is not read, even a nan
        return None
    if len(ops.tensor_shape(x)) != 2 or len(ops.tensor_shape(matrix)) != 2:
        return None
    scaled_bias = b if beta == 1 else T.bin("mul", b, T.const(beta))
    return T.scaled_linear(xt, T.transpose(m, 0, 1), scaled_bias, T.const(alpha))


def _max_values(low: Lowered, node: Node) -> Any:
    """`torch.max(x, dim, keepdim).values` (or `[0]`): the max reduction's values."""
    source, part = node.args[0], node.args[1] if len(node.args) > 1 else None
    if part not in ("values", 0) or not isinstance(source, Node):
        return None
    name = ops.op_name(source)
    if name not in ("max", "min"):
        return None
    args = ops.arguments(source, ("input", "dim", "keepdim"))
    if not args or set(args) - {"input", "dim", "keepdim"} or args.get("dim") is None:
        return None
    x, dim, keep = args.get("input"), args.get("dim"), args.get("keepdim", False)
    a, dim = _tensor(low, x), _dim(x, dim)
    if a is None or dim is None or not isinstance(keep, bool):
        return None
    return T.red("amax" if name == "max" else "amin", a, dim, keep)


def _scalar_tensor(node: Node) -> Any:
    """`torch.tensor(0.5, device=...)`: a 0-d constant, as a scalar operand."""
    if len(node.args) != 1 or set(node.kwargs) - {"device", "dtype"}:
        return None
    value = node.args[0]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if ops.tensor_dtype(node) != torch.float32:
        return None
    return T.const(float(value))


def _only_input(node: Node) -> bool:
    if node.kwargs and set(node.kwargs) - {"approximate", "inplace"}:
        return False
    if node.kwargs.get("approximate", "none") != "none" or node.kwargs.get("inplace"):
        return False
    return len(node.args) == 1


def _clamp(low: Lowered, node: Node) -> Any:
    args = ops.arguments(node, ("input", "min", "max"))
    if not args or set(args) - {"input", "min", "max"}:
        return None
    a = _tensor(low, args.get("input"))
    bounds = [args.get("min"), args.get("max")]
    if a is None or not all(
        b is None or (isinstance(b, int | float) and not isinstance(b, bool)) for b in bounds
    ):
        return None
    lower_, upper = (
        (float("-inf") if bounds[0] is None else float(bounds[0])),
        (float("inf") if bounds[1] is None else float(bounds[1])),
    )
    return T.clamp(a, lower_, upper)


def _reduction(low: Lowered, node: Node, name: str) -> Any:
    args = ops.arguments(node, ("input", "dim", "keepdim"))
    if not args or set(args) - {"input", "dim", "keepdim"}:
        return None
    x, dim, keep = args.get("input"), args.get("dim"), args.get("keepdim", False)
    if isinstance(dim, list | tuple) and len(dim) == 1:
        dim = dim[0]
    a, dim = _tensor(low, x), _dim(x, dim)
    if a is None or dim is None or not isinstance(keep, bool):
        return None
    return T.red(name, a, dim, keep)


def _module_term(low: Lowered, node: Node) -> Any:
    module = ops.call_module(low.gm, node)
    if module is None or len(node.args) != 1 or node.kwargs:
        return None
    x = _tensor(low, node.args[0])
    if x is None:
        return None
    kind = UNARY_MODULES.get(type(module))
    if kind is not None and _default_module(module):
        return T.un(kind, x)
    if isinstance(module, nn.Linear):
        w = low.leaf(f"{node.target}.weight", known_sizes=True)
        b = low.leaf(f"{node.target}.bias", True) if module.bias is not None else T.none()
        return T.linear(x, w, b)
    dims = CONV_MODULES.get(type(module))
    batched = dims is not None and len(ops.tensor_shape(node.args[0]) or ()) == dims + 2
    if batched and module.padding_mode == "zeros" and isinstance(module.padding, tuple):
        low.convs.append(
            ConvSpec(dims, module.stride, module.padding, module.dilation, module.groups)
        )
        w = low.leaf(f"{node.target}.weight", known_sizes=True)
        b = low.leaf(f"{node.target}.bias", True) if module.bias is not None else T.none()
        return T.conv(x, w, b, len(low.convs) - 1)
    if isinstance(module, NORM_MODULES) and not getattr(module, "track_running_stats", False):
        low.norms.append(node)
        return T.norm(type(module).__name__, x, T.none(), T.none(), len(low.norms) - 1)
    if isinstance(module, nn.Dropout | nn.Dropout2d | nn.Dropout3d) and not module.inplace:
        low.norms.append(node)  # replayed as it is: random in training mode
        return T.norm("dropout", x, T.none(), T.none(), len(low.norms) - 1)
    return None


def _default_module(module: nn.Module) -> bool:
    """Activation modules lowered only with their default settings."""
    if isinstance(module, nn.GELU):
        return module.approximate == "none"
    if isinstance(module, nn.LeakyReLU | nn.ELU | nn.Softplus | nn.Hardtanh):
        return all(
            getattr(module, name) == value
            for name, value in (
                ("negative_slope", 0.01),
                ("alpha", 1.0),
                ("beta", 1.0),
                ("threshold", 20.0),
                ("min_val", -1.0),
                ("max_val", 1.0),
            )
            if hasattr(module, name)
        )
    return True
