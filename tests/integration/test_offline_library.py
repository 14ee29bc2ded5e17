"""Library substitution: hand-written softmax/norm/GELU/attention/linear code replaced by
the fused torch op, on the fx graph and (for forwards fx cannot trace) in the source text.
Every rewrite is judged by the real verifier (static check, trials, state_dict, reload)."""

from __future__ import annotations

import re
import types
from pathlib import Path

import torch

from agents.evaluate import EvalOptions, evaluate
from agents.offline.fx import tracing
from agents.offline.passes.base import Program, Rewrite
from agents.offline.passes.library import LibrarySubstitution
from agents.task import SourceFile
from agents.verify.static_check import check_candidate
from agents.verify.verdict import Verdict

BENCH = Path(__file__).parents[2] / "bench" / "problems"
OPTIONS = EvalOptions(measure=False, jail=False, threads=1)
HEADER = """import math

import torch
import torch.nn as nn
import torch.nn.functional as F


"""


def program(text: str, path: str = "problem.py") -> Program:
    """Build the reference in-process, as the sandboxed planner would."""
    module = types.ModuleType("offline_library_problem")
    module.__file__ = path
    exec(compile(text, path, "exec"), module.__dict__)
    torch.manual_seed(0)
    init = module.get_init_inputs()
    model = module.Model(*init).eval()
    return Program(text, "Model", model, module.get_inputs(), init, "cpu")


def bench(name: str) -> tuple[str, str]:
    """A bench problem with its size constants capped (the verifier's trials stay fast)."""
    path = next(BENCH.glob(f"{name}*.py"))
    text = re.sub(
        r"^([A-Z][A-Z0-9_]*) = (\d+)$",
        lambda m: f"{m[1]} = {min(int(m[2]), 64)}",
        path.read_text(),
        flags=re.M,
    )
    return text, str(path)


def rewrite(text: str, path: str = "problem.py") -> Rewrite:
    return LibrarySubstitution().apply(program(text, path))


def verified(problem: str, result: Rewrite, method: str = "fx", path: str = "problem.py") -> str:
    """The rewrite's forward, after the static checker and the verifier accept it."""
    assert result.source is not None, result.summary
    assert result.method == method and result.changes
    assert check_candidate(result.source) == []
    judged = evaluate(SourceFile(problem, path), SourceFile(result.source, "cand.py"), OPTIONS)
    assert judged.verdict == Verdict.CORRECT, judged.reasons
    assert judged.state_dict_compatible and judged.reload_check == "passed"
    return result.source[result.source.index("    def forward") :]


# -- bench problems --------------------------------------------------------------------------


def test_bench_manual_softmax() -> None:
    text, path = bench("17_manual_softmax")
    result = rewrite(text, path)
    assert result.changes == ["line 17-19: hand-written softmax over dim 1 → torch.softmax"]
    forward = verified(text, result, path=path)
    assert "torch.softmax(x, dim=1)" in forward
    assert "torch.exp" not in forward and "torch.max" not in forward


def test_bench_manual_layernorm() -> None:
    text, path = bench("18_manual_layernorm")
    result = rewrite(text, path)
    assert result.changes == [
        "line 22-25: hand-written layer norm over the last dim with weight and bias → F.layer_norm"
    ]
    forward = verified(text, result, path=path)
    assert "weight=self.weight, bias=self.bias, eps=1e-05)" in forward
    assert "sqrt" not in forward and "mean" not in forward


def test_bench_manual_layernorm_reads_eps_from_the_module_when_floats_stay_symbolic() -> None:
    """How the sandboxed child runs the pass: `self.eps` stays an attribute, so the rewrite
    is right for any eps the constructor gets, not only the verified one."""
    text, path = bench("18_manual_layernorm")
    result = tracing.apply_general_first(LibrarySubstitution(), program(text, path))
    forward = verified(text, result, path=path)
    assert "weight=self.weight, bias=self.bias, eps=self.eps)" in forward
    assert "_check_specialised" not in result.source
    spaces: list[dict] = [{}, {}]
    exec(compile(text, path, "exec"), spaces[0])
    exec(compile(result.source, "rewrite.py", "exec"), spaces[1])
    model, new = spaces[0]["Model"](16, 0.5), spaces[1]["ModelNew"](16, 0.5)
    new.load_state_dict(model.state_dict())
    x = torch.randn(4, 16)
    torch.testing.assert_close(new(x), model(x), rtol=1e-5, atol=1e-5)


def test_bench_attention_block_keeps_the_default_scale() -> None:
    """q's last dim is the reshape's `dim // heads`, the divisor's argument: default scale."""
    text, path = bench("20_attention")
    result = rewrite(text, path)
    assert result.changes == [
        "line 28-30: hand-written attention softmax(q @ kᵀ · scale) @ v "
        "→ F.scaled_dot_product_attention"
    ]
    forward = verified(text, result, path=path)
    assert "F.scaled_dot_product_attention(getitem_3, getitem_4, getitem_5)" in forward
    assert "softmax" not in forward and "sqrt" not in forward


def test_bench_swish() -> None:
    text, path = bench("07_swish")
    result = rewrite(text, path)
    assert result.changes == ["line 17: hand-written swish x * sigmoid(x) → F.silu"]
    assert "F.silu(x)" in verified(text, result, path=path)


def test_bench_gelu_problems_already_use_the_library() -> None:
    for name in ("08_gelu", "10_gemm_gelu"):
        result = rewrite(*bench(name))
        assert result.source is None and result.summary.startswith("no hand-written")


# -- synthetic patterns ----------------------------------------------------------------------

LOG_SOFTMAX = (
    HEADER
    + """class Model(nn.Module):
    def forward(self, x, y, z):
        m = torch.max(x, dim=-1, keepdim=True).values
        a = x - m - torch.log(torch.sum(torch.exp(x - m), dim=-1, keepdim=True))
        b = y - torch.logsumexp(y, 1, keepdim=True)
        c = torch.log(torch.exp(z).sum(dim=0, keepdim=True))
        mz = z.amax(0, keepdim=True)
        d = mz + torch.log(torch.exp(z - mz).sum(0, keepdim=True))
        e = torch.log(torch.exp(y) / torch.exp(y).sum(1, keepdim=True))
        return a, b, c, d, e


def get_inputs():
    return [torch.randn(8, 32), torch.randn(8, 32), torch.randn(16, 4)]


def get_init_inputs():
    return []
"""
)


def test_log_softmax_and_logsumexp_forms() -> None:
    result = rewrite(LOG_SOFTMAX)
    assert [c.split(": ", 1)[1] for c in result.changes] == [
        "hand-written log-softmax over dim -1 → torch.log_softmax",
        "hand-written log-softmax over dim 1 → torch.log_softmax",
        "hand-written logsumexp over dim 0 → torch.logsumexp",
        "hand-written logsumexp over dim 0 → torch.logsumexp",
        "hand-written log-softmax over dim 1 → torch.log_softmax",
    ]
    assert result.changes[0].startswith("line 10-11:")
    forward = verified(LOG_SOFTMAX, result)
    assert "torch.log_softmax(x, dim=-1)" in forward and "torch.log_softmax(y, dim=1)" in forward
    assert forward.count("torch.logsumexp(z, dim=0, keepdim=True)") == 2
    for gone in ("torch.exp", "torch.log(", "torch.max", "amax", "torch.sum"):
        assert gone not in forward


NORMS = (
    HEADER
    + """class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)
        self.eps = 1e-6

    def forward(self, x, y):
        a = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        b = y / torch.sqrt(torch.mean(y * y, dim=(1, 2), keepdim=True) + 1e-5)
        var = y.var(2, unbiased=False, keepdim=True)
        c = (y - y.mean(dim=2, keepdim=True)) * (var + 1e-5).rsqrt()
        d = (x - x.mean(-1, keepdim=True)) / torch.var(x, -1, keepdim=True, correction=0).sqrt()
        return a, b, c, d


def get_inputs():
    return [torch.randn(4, 8, 32), torch.randn(4, 6, 16)]


def get_init_inputs():
    return [32]
"""
)


def test_rms_norm_and_layer_norm_forms() -> None:
    result = rewrite(NORMS)
    assert [c.split(": ", 1)[1] for c in result.changes] == [
        "hand-written RMS norm over the last dim with weight → F.rms_norm",
        "hand-written RMS norm over the last 2 dims → F.rms_norm",
        "hand-written layer norm over the last dim → F.layer_norm",
        "hand-written layer norm over the last dim → F.layer_norm",
    ]
    forward = verified(NORMS, result)
    assert "F.rms_norm(x, getitem, weight=self.weight, eps=1e-06)" in forward
    assert "getattr_2[-2:]" in forward and "F.layer_norm(y, " in forward


LEADING_RMS = (
    HEADER
    + """class Model(nn.Module):
    def forward(self, x):
        return x / torch.sqrt(torch.mean(x**2, dim=1, keepdim=True) + 1e-5)


def get_inputs():
    return [torch.randn(4, 8, 6, 6)]


def get_init_inputs():
    return []
"""
)


def test_norm_over_a_leading_dim_is_declined() -> None:
    """F.rms_norm normalises trailing dims only; KernelBench's RMSNorm reduces over dim 1."""
    result = rewrite(LEADING_RMS)
    assert result.source is None
    assert "RMS norm over dims (1,), not the trailing dims" in result.summary


ACTIVATIONS = (
    HEADER
    + """class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.Sigmoid()

    def forward(self, x, y):
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
        a = 0.5 * x * (1.0 + torch.tanh(inner))
        b = y * 0.5 * (1 + torch.erf(y / math.sqrt(2.0)))
        c = x * torch.sigmoid(x) + y * self.act(y)
        d = y / (1 + torch.exp(-y))
        e = x * torch.tanh(torch.log1p(torch.exp(x))) + y * torch.tanh(F.softplus(y))
        f = x * F.relu6(x + 3) / 6 + y * torch.clamp(3.0 + y, 0, 6) / 6.0
        return a, b, c, d, e, f


def get_inputs():
    return [torch.randn(8, 64), torch.randn(8, 64)]


def get_init_inputs():
    return []
"""
)


def test_gelu_and_swish_forms() -> None:
    result = rewrite(ACTIVATIONS)
    assert [c.split(": ", 1)[1] for c in result.changes] == [
        'hand-written GELU (tanh approximation) → F.gelu(approximate="tanh")',
        "hand-written GELU (erf form) → F.gelu",
        *["hand-written swish x * sigmoid(x) → F.silu"] * 3,
        *["hand-written mish x * tanh(softplus(x)) → F.mish"] * 2,
        *["hand-written hardswish x * relu6(x + 3) / 6 → F.hardswish"] * 2,
    ]
    forward = verified(ACTIVATIONS, result)
    assert "F.gelu(x, approximate='tanh')" in forward and "F.gelu(y)" in forward
    assert forward.count("F.silu(") == 3 and "self.act" not in forward
    assert forward.count("F.mish(") == forward.count("F.hardswish(") == 2


ATTENTION = (
    HEADER
    + """class Model(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.scale = 0.3
        self.qkv = nn.Linear(dim, 3 * dim)
        self.drop = nn.Dropout(0.0)

    def forward(self, x, mask, bias):
        q, k, v = self.qkv(x).unflatten(-1, (3, self.heads, -1)).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) * self.scale
        att = att.masked_fill(mask, float("-inf"))
        y = self.drop(F.softmax(att, dim=-1)) @ v
        s = torch.matmul(q, k.mT) / math.sqrt(k.size(-1))
        s = s.masked_fill(torch.tril(torch.ones_like(s)) == 0, -math.inf)
        z = torch.matmul(torch.softmax(s, dim=-1), v)
        w = torch.softmax(q @ k.transpose(-1, -2) / 4.0 + bias, dim=-1) @ v
        return y + z + w


def get_inputs():
    mask = torch.rand(16, 16).triu(1) > 0.5
    return [torch.randn(2, 16, 32), mask, torch.randn(16, 16)]


def get_init_inputs():
    return [32, 4]
"""
)


def test_masked_attention_on_the_graph() -> None:
    """A mask input becomes attn_mask (True: attend); a tril built from the scores in
    forward is is_causal; the head dim read from k.size(-1) gives the default scale."""
    result = rewrite(ATTENTION)
    assert result.changes == [
        "line 18-20: hand-written attention softmax(q @ kᵀ · scale) @ v with a mask "
        "→ F.scaled_dot_product_attention",
        "line 21-23: hand-written attention softmax(q @ kᵀ · scale) @ v with a causal mask "
        "→ F.scaled_dot_product_attention",
        "line 24: hand-written attention softmax(q @ kᵀ · scale) @ v with an additive mask "
        "→ F.scaled_dot_product_attention",
    ]
    forward = verified(ATTENTION, result)
    assert "mask.logical_not()" in forward and ", attn_mask=logical_not, scale=0.3)" in forward
    assert "is_causal=True)" in forward and "tril" not in forward and "softmax" not in forward
    assert "getitem_2, attn_mask=bias, scale=0.25)" in forward


MINGPT = (
    HEADER
    + """class Model(nn.Module):
    def __init__(self, dim, heads, seq):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.drop = nn.Dropout(0.0)
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.drop(att)
        y = att @ v
        return y.transpose(1, 2).contiguous().view(B, T, C)


def get_inputs():
    return [torch.randn(2, 16, 32)]


def get_init_inputs():
    return [32, 4, 16]
"""
)


def test_mingpt_attention_through_the_source_fallback() -> None:
    """fx cannot slice a buffer with a traced size. The buffer mask stays a mask: the
    verifier's reload check loads a random buffer, where `== 0` masks nothing."""
    result = rewrite(MINGPT)
    assert result.method == "source" and len(result.changes) == 1
    forward = verified(MINGPT, result, method="source")
    assert (
        "        y = F.scaled_dot_product_attention(q, k, v, "
        "attn_mask=self.bias[:, :, :T, :T] != 0)\n"
    ) in forward


CAUSAL = (
    HEADER
    + """class Model(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.drop = nn.Dropout(0.0)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)  # fx: torch.ones(T, T) below cannot be traced
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(T, T, device=x.device))
        att = att.masked_fill(mask == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.drop(att)
        y = att @ v
        return y.transpose(1, 2).contiguous().view(B, T, C)


def get_inputs():
    return [torch.randn(2, 16, 32)]


def get_init_inputs():
    return [32, 4]
"""
)


def test_causal_attention_through_the_source_fallback() -> None:
    """fx cannot trace torch.ones(T, T); the text is rewritten, all other lines kept."""
    result = rewrite(CAUSAL)
    assert result.changes == [
        "line 21-26: hand-written attention softmax(q @ kᵀ · scale) @ v with a mask "
        "→ F.scaled_dot_product_attention"
    ]
    forward = verified(CAUSAL, result, method="source")
    original = CAUSAL[CAUSAL.index("    def forward") : CAUSAL.index("\n\n\ndef get_inputs")]
    expected = [line for line in original.splitlines() if "att" not in line]
    expected.insert(-1, "        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask != 0)")
    assert forward.rstrip("\n").splitlines() == expected


UNTRACEABLE = (
    HEADER
    + """class Model(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        if x.sum() > 1e9:  # a Python branch on a tensor: fx gives up
            x = x * 0.5
        batch, seq, dim = x.shape
        head_dim = dim // self.heads
        q, k, v = self.qkv(x).reshape(batch, seq, 3, self.heads, head_dim).permute(2, 0, 3, 1, 4)
        weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(head_dim), dim=-1)
        context = torch.matmul(weights, v)
        x = context.transpose(1, 2).reshape(batch, seq, dim)
        x = x - torch.max(x, dim=1, keepdim=True)[0]
        e = torch.exp(x)
        return e / torch.sum(e, dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(2, 16, 32)]


def get_init_inputs():
    return [32, 4]
"""
)


def test_attention_and_softmax_through_the_source_fallback() -> None:
    result = rewrite(UNTRACEABLE)
    assert result.changes == [
        "line 20-21: hand-written attention softmax(q @ kᵀ · scale) @ v "
        "→ F.scaled_dot_product_attention",
        "line 23-25: hand-written softmax over dim 1 → torch.softmax",
    ]
    forward = verified(UNTRACEABLE, result, method="source")
    assert (
        "        context = F.scaled_dot_product_attention(q, k, v, "
        "scale=1.0 / math.sqrt(head_dim))\n"
        "        x = context.transpose(1, 2).reshape(batch, seq, dim)\n"
        "        return torch.softmax(x, dim=1)\n"
    ) in forward
    assert "# a Python branch on a tensor: fx gives up" in forward


MATMUL_BIAS = (
    HEADER
    + """class Model(nn.Module):
    def __init__(self, n, m):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(m, n) / n**0.5)
        self.bias = nn.Parameter(torch.randn(m))
        self.w2 = nn.Parameter(torch.randn(m, m))

    def forward(self, x, z):
        a = torch.matmul(x, self.weight.t()) + self.bias
        b = self.bias + z @ self.weight.T
        c = torch.mm(a, self.w2) + a
        return a, b, c


def get_inputs():
    return [torch.randn(8, 16), torch.randn(2, 8, 16)]


def get_init_inputs():
    return [16, 12]
"""
)


def test_matmul_plus_bias() -> None:
    result = rewrite(MATMUL_BIAS)
    forward = verified(MATMUL_BIAS, result)
    assert "F.linear(x, self.weight, self.bias)" in forward
    assert "F.linear(z, self.weight, self.bias)" in forward
    assert "torch.addmm(linear, linear, self.w2)" in forward


# -- declines --------------------------------------------------------------------------------

SOFTMAX = (
    HEADER
    + """class Model(nn.Module):
    def forward(self, x):
        e = torch.exp(x - x.max(dim=1, keepdim=True)[0])
        return BODY


def get_inputs():
    return [torch.randn(16, 16)]


def get_init_inputs():
    return []
"""
)


def test_reused_intermediate_is_left_alone() -> None:
    """exp(x - max) is returned too: the hand-written work is still needed."""
    text = SOFTMAX.replace("BODY", "e / e.sum(dim=1, keepdim=True), e")
    result = rewrite(text)
    assert result.source is None and result.summary.startswith("no hand-written")


def test_softmax_over_the_wrong_dim() -> None:
    """Without keepdim the sum broadcasts along the other dim: no softmax at all. A max
    taken over another dim than the sum is not constant along it: the shift must stay."""
    text = SOFTMAX.replace("BODY", "e / e.sum(dim=1)")
    assert rewrite(text).source is None
    text = SOFTMAX.replace("BODY", "e / e.sum(dim=0, keepdim=True)")
    forward = verified(text, rewrite(text))
    assert "torch.softmax(sub, dim=0)" in forward and "max(dim=1, keepdim=True)" in forward
