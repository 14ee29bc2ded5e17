"""Source text of the triton-gemm pass's kernels: the shared helpers (tile tables, the 3xTF32
product loop, the launcher), one autotuned kernel per site, and the method ModelNew calls.

Everything here is text, so it is tested without a GPU: it parses, it names no sizes (they
are kernel arguments; K is a `tl.constexpr` because the K loop's bound must be a Python int
for the CPU interpreter, and a constant trip count costs nothing on the GPU: KernelBench
shapes are fixed, so a kernel compiles once per K), and the autotune table is a fixed list,
so the same program always gives the same source.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.offline.passes.triton_gemm_epilogue import epilogue_lines, needs_row_tile
from agents.offline.passes.triton_gemm_match import ROW_MAX_N, Site, Step

PRECISIONS = ("tf32x3", "ieee", "tf32")
"""tl.dot input precisions: the pass writes "tf32x3" (fp32-level accuracy on tensor cores);
the accuracy bench also renders "ieee" (CUDA-core fp32) and plain "tf32" (which the verifier
refuses) to measure them against float64."""


@dataclass(frozen=True)
class Tile:
    """One autotune candidate. block_n 0: set by the launcher to span the row."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int
    warps: int
    stages: int


TILES = (
    Tile(128, 256, 32, 8, 8, 3),
    Tile(128, 256, 32, 8, 8, 4),
    Tile(256, 128, 32, 8, 8, 3),
    Tile(256, 128, 32, 8, 8, 4),
    Tile(128, 128, 32, 8, 8, 4),
    Tile(128, 128, 32, 8, 8, 5),
    Tile(128, 128, 64, 8, 8, 3),
    Tile(128, 64, 32, 8, 4, 4),
    Tile(64, 128, 32, 8, 4, 4),
    Tile(64, 64, 32, 8, 4, 4),
    Tile(32, 64, 32, 8, 4, 5),
)
"""Tiles for a plain epilogue, largest first: 128x256 and 256x128 (8 warps, 3-4 stages) for
large GEMMs, where one tile's A and B panels are reused most; 128x128 at 4-5 stages or
BLOCK_K 64; smaller tiles for GEMMs too small to fill the device with those. BLOCK_K 32: a
tf32 MMA takes 8, three products per step keep 32 busy. Stages stay within Hopper's 227 KB
of shared memory (128x256x32 fp32 is 48 KB a stage). `_tgemm_prune` keeps, per GEMM, the
tiles that fit it (LARGE_MN: only tiles of 128x128 or more once M*N is that large), so
the first call compiles a handful of them, not all."""
LARGE_MN = 1 << 21
"""M*N (batch included) from which tiles under 128x128 are never tried: by then 128x128
tiles already give every SM of an H100 (132) more than a wave of work."""
ROW_TILES = (
    Tile(16, 0, 32, 1, 4, 3),
    Tile(32, 0, 32, 1, 4, 3),
    Tile(64, 0, 32, 1, 8, 3),
    Tile(64, 0, 16, 1, 8, 4),
)
"""Tiles for an epilogue that reduces rows: BLOCK_N spans N (<= ROW_MAX_N), so only the
rows per program, BLOCK_K and the pipeline depth are tuned."""


def render_tiles(name: str, tiles: tuple[Tile, ...]) -> str:
    lines = [f"{name} = ["]
    lines += [f"    {config_text(tile_config(tile))}," for tile in tiles]
    return "\n".join([*lines, "]"])


def tile_config(tile: Tile) -> dict[str, int]:
    """A tile as memory/tuning.py stores a config (no BLOCK_N where the launcher sets it)."""
    blocks = {"BLOCK_M": tile.block_m, "BLOCK_N": tile.block_n, "BLOCK_K": tile.block_k}
    if not tile.block_n:
        del blocks["BLOCK_N"]
    return {**blocks, "GROUP_M": tile.group_m, "num_warps": tile.warps, "num_stages": tile.stages}


def config_text(config: dict[str, int]) -> str:
    """`triton.Config(...)` for a config of memory/tuning.CONFIG_KEYS (ints only)."""
    meta = ", ".join(f'"{k}": {int(v)}' for k, v in config.items() if k.isupper())
    warps, stages = int(config["num_warps"]), int(config["num_stages"])
    return f"triton.Config({{{meta}}}, num_warps={warps}, num_stages={stages})"


def describe_config(config: dict[str, int]) -> str:
    """`128x128x32, 8 warps, 3 stages` (BLOCK_N "row" where one tile spans the row)."""
    n = config.get("BLOCK_N", "row")
    return (
        f"{config['BLOCK_M']}x{n}x{config['BLOCK_K']}, {config['num_warps']} warps, "
        f"{config['num_stages']} stages"
    )


_PRODUCT = '''
@triton.jit
def _tgemm_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of program `pid`, taking GROUP_M row tiles at a time so that programs
    running together share their A and B panels in L2."""
    tiles_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * tiles_n
    first_m = (pid // group) * GROUP_M
    size_m = tl.minimum(tl.cdiv(M, BLOCK_M) - first_m, GROUP_M)
    return first_m + (pid % group) % size_m, (pid % group) // size_m


@triton.jit
def _tgemm_product(
    a_ptr, b_ptr, M, N, K: tl.constexpr, stride_am, stride_ak, stride_bk, stride_bn,
    pid_m, pid_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """One output tile's fp32 accumulator over all of K; loads past the edges read 0 (masks,
    not index wrap-around, so contiguous rows keep their vector loads).
    input_precision="{precision}": {why}"""
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if K % BLOCK_K == 0:  # known when compiling: no K mask in the loop
            a = tl.load(a_ptrs, mask=rm[:, None] < M, other=0.0)
            b = tl.load(b_ptrs, mask=rn[None, :] < N, other=0.0)
        else:
            a_mask = (rm[:, None] < M) & (rk[None, :] < K - k * BLOCK_K)
            b_mask = (rk[:, None] < K - k * BLOCK_K) & (rn[None, :] < N)
            a = tl.load(a_ptrs, mask=a_mask, other=0.0)
            b = tl.load(b_ptrs, mask=b_mask, other=0.0)
        acc = tl.dot(a, b, acc, input_precision="{precision}")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc
'''
_WHY = {
    "tf32x3": "each fp32 operand is split into a TF32 high part and a TF32\n    residual, "
    "and three tensor-core products are summed in fp32 (fp32-level accuracy,\n    as in "
    'CUTLASS\'s "fast accurate" SGEMM).',
    "ieee": "fp32 products on CUDA cores.",
    "tf32": "one TF32 tensor-core product (about 1e-3 relative error:\n    refused for "
    "fp32 references; only the accuracy bench renders it).",
}

_TANH = '''
@triton.jit
def _tgemm_tanh(x):
    """tanh in fp32 from tl.exp (Cephes' tanhf): libdevice's tanh does not exist in the CPU
    interpreter that tests this code."""
    z = tl.abs(x)
    big = 1.0 - 2.0 / (tl.exp(2.0 * z) + 1.0)
    s = x * x
    p = ((-5.70498872745e-3 * s + 2.06390887954e-2) * s - 5.37397155531e-2) * s
    small = ((p + 1.33314422036e-1) * s - 3.33332819422e-1) * s * x + x
    return tl.where(z >= 0.625, tl.where(x < 0.0, -big, big), small)
'''

_LOG1P = '''
@triton.jit
def _tgemm_log1p(u):
    """log(1 + u) without the rounding of 1 + u for small u (Goldberg's correction)."""
    w = 1.0 + u
    exact = tl.log(w) * (u / (w - 1.0))
    return tl.where(w == 1.0, u, tl.where(w == float("inf"), w, exact))
'''

_TUNE = '''
def _tgemm_prune(configs, named_args, **kwargs):
    """The tiles worth timing for this GEMM (never none): none taller or wider than the next
    power of two of M or N (32 at least), and none under 128x128 once B*M*N reaches
    _TGEMM_LARGE_MN, since compiling each tile is what the first call spends its time on."""
    m, n, batch = named_args["M"], named_args["N"], named_args["B"]
    fit_m, fit_n = max(32, triton.next_power_of_2(m)), max(32, triton.next_power_of_2(n))

    def size(config):
        return config.kwargs["BLOCK_M"], config.kwargs.get("BLOCK_N", kwargs.get("BLOCK_N", 0))

    kept = [c for c in configs if size(c)[0] <= fit_m and size(c)[1] <= fit_n]
    if batch * m * n >= _TGEMM_LARGE_MN:
        kept = [c for c in kept if size(c)[0] * size(c)[1] >= 128 * 128] or kept
    return kept or [min(configs, key=lambda c: size(c)[0] * size(c)[1])]


def _tgemm_bench(fn, quantiles):
    """Autotuning's timing of one tile: 5 ms of warm-up and 40 ms of runs (Triton's default
    is 25 and 100), which still tells tiles 5% apart on a GEMM of a millisecond."""
    return triton.testing.do_bench(fn, warmup=5, rep=40, quantiles=quantiles)
'''

_LAUNCH = '''
def _tgemm_operands(form, a, b):
    """a as (batch, M, K), b as (batch, K, N), and the GEMM output's shape: "linear" (b is an
    (N, K) weight), "matmul" (b is (K, N); a's leading dims fold into M) or "batched" (a and
    b share their leading dims). Views wherever the strides allow: the kernel takes strides."""
    if form == "linear":
        b = b.t()
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"GEMM operands of shapes {tuple(a.shape)} and {tuple(b.shape)}")
    if form == "batched":  # batch dims broadcast as stride-0 views, as torch.matmul's do
        batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a, b = a.expand(*batch, *a.shape[-2:]), b.expand(*batch, *b.shape[-2:])
        shape = (*batch, a.shape[-2], b.shape[-1])
        return a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]), shape
    shape = (*a.shape[:-1], b.shape[-1])
    return a.reshape(1, math.prod(a.shape[:-1]), a.shape[-1]), b.unsqueeze(0), shape


def _tgemm_launch(kernel, a, b, shape, tensors, scalars, span=False, rows=False, keepdim=False):
    """Run one fused kernel: (batch, M, K) @ (batch, K, N), then the epilogue, into a fresh
    fp32 output of the GEMM's shape, or one value per row (`rows`, of shape (..., M, 1) with
    `keepdim`). `span`: the epilogue reduces rows, so one tile spans N. Epilogue tensors are
    broadcast views (stride 0 where they broadcast)."""
    if a.dtype != torch.float32 or b.dtype != torch.float32:
        raise TypeError(f"the Triton GEMM takes fp32 operands, not {a.dtype} and {b.dtype}")
    batch, m, k = a.shape
    n = b.shape[2]
    final = ((*shape[:-1], 1) if keepdim else shape[:-1]) if rows else shape
    out = torch.empty((batch, m, 1 if rows else n), device=a.device, dtype=torch.float32)
    views = [t.expand(shape).reshape(batch, m, n) for t in tensors]
    if batch * m == 0 or (n == 0 and not rows):
        return out.view(final)
    extra = {}
    if span:
        extra["BLOCK_N"] = max(16, triton.next_power_of_2(n))
        if n == 0 or n > _TGEMM_ROW_MAX_N:
            limit = _TGEMM_ROW_MAX_N
            raise ValueError(f"the fused row reduction takes 1 to {limit} columns, not {n}")
    if batch > 65535:
        raise ValueError(f"{batch} GEMMs in a batch: the grid's second axis holds 65535")
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]), batch)
    kernel[grid](
        a, b, out, *views, *(float(s) for s in scalars), batch, m, n, k,
        *a.stride(), *b.stride(), *out.stride(), *(s for v in views for s in v.stride()),
        **extra,
    )
    return out.view(final)


def _tgemm_expect(value, expected, name):
    """The kernel was written for this module setting; another needs another rewrite."""
    if value != expected:
        raise ValueError(f"the Triton kernel was written for {name} = {expected!r}, not {value!r}")
'''


def helpers(steps: list[tuple[Step, ...]], precision: str = "tf32x3") -> str:
    """The module-level code the kernels share: the tile tables they use, the product loop,
    tanh/log1p when a step needs them, the launcher."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown tl.dot input precision {precision!r}")
    ops = {step.op for chain in steps for step in chain}
    gelu_tanh = any(s.op == "gelu" and s.option == "tanh" for chain in steps for s in chain)
    spans = [needs_row_tile(chain) for chain in steps]
    parts = [render_tiles("_TGEMM_TILES", TILES)] if not all(spans) else []
    parts.append(f"_TGEMM_LARGE_MN = {LARGE_MN}")
    if any(spans):
        parts += [render_tiles("_TGEMM_ROW_TILES", ROW_TILES), f"_TGEMM_ROW_MAX_N = {ROW_MAX_N}"]
    parts.append(_PRODUCT.replace("{precision}", precision).replace("{why}", _WHY[precision]))
    if ops & {"tanh", "mish"} or gelu_tanh:
        parts.append(_TANH)
    if ops & {"mish", "softplus"}:
        parts.append(_LOG1P)
    parts += [_TUNE, _LAUNCH]
    return "\n".join(part.strip("\n") + "\n\n" for part in parts).rstrip() + "\n"


def kernel(
    name: str, site: Site, doc: str, remembered: dict[str, int] | None = None, memo: str = ""
) -> str:
    """One autotuned kernel: the GEMM tile, the epilogue, one store. With a `remembered`
    config (memory/tuning.py) that config is the whole autotune list, so the first call
    compiles one kernel and benchmarks nothing; `memo` says where it came from."""
    tensors, scalars, result = len(site.tensors), len(site.scalars), site.result
    table = "_TGEMM_ROW_TILES" if needs_row_tile(site.steps) else "_TGEMM_TILES"
    head = []
    if remembered is not None:
        table = f"[{config_text(remembered)}]"
        head = [f"# tile from memory ({memo}): {describe_config(remembered)}"]
    pointers = ["a_ptr", "b_ptr", "out_ptr", *(f"t{i}_ptr" for i in range(tensors))]
    pointers += [f"s{i}" for i in range(scalars)]
    strides = [f"t{i}_sb, t{i}_sm, t{i}_sn," for i in range(tensors)]
    body = epilogue_lines(site.steps, tensors)
    where = "out_ptr + batch * stride_ob + rows * stride_om"
    if site.rows:
        store = f"tl.store({where}, v{result}, mask=rows < M)"
    else:
        store = f"tl.store({where} + cols * stride_on, v{result}, mask=in_bounds)"
    lines = [
        *head,
        f'@triton.autotune(configs={table}, key=["B", "M", "N", "K"], '
        'prune_configs_by={"early_config_prune": _tgemm_prune}, do_bench=_tgemm_bench)',
        "@triton.jit",
        f"def {name}(",
        f"    {', '.join(pointers)},",
        "    B, M, N, K: tl.constexpr,",
        "    stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn,",
        "    stride_ob, stride_om, stride_on,",
        *(f"    {line}" for line in strides),
        "    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,",
        "    GROUP_M: tl.constexpr,",
        "):",
        f'    """{doc}"""',
        "    batch = tl.program_id(1).to(tl.int64)",
        "    pid_m, pid_n = _tgemm_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)",
        "    v0 = _tgemm_product(",
        "        a_ptr + batch * stride_ab, b_ptr + batch * stride_bb, M, N, K,",
        "        stride_am, stride_ak, stride_bk, stride_bn,",
        "        pid_m, pid_n, BLOCK_M, BLOCK_N, BLOCK_K,",
        "    )",
        "    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M))[:, None]",
        "    cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N))[None, :]",
        "    in_bounds = (rows < M) & (cols < N)",
        *(f"    {line}" for line in body),
        f"    {store}",
    ]
    return "\n".join(lines) + "\n"


def method(name: str, kernel_name: str, site: Site, doc: str) -> str:
    """The ModelNew method forward calls: setting checks, operand views, the launch."""
    tensor_names = [f"t{i}" for i in range(len(site.tensors))]
    scalar_names = [f"s{i}" for i in range(len(site.scalars))]
    flags = ", span=True" if needs_row_tile(site.steps) else ""
    flags += f", rows=True, keepdim={site.keepdim}" if site.rows else ""
    body = [f"_tgemm_expect(self.{g.path}, {g.value!r}, 'self.{g.path}')" for g in site.guards]
    launch = f"{kernel_name}, a, b, shape, {_tuple(tensor_names)}, {_tuple(scalar_names)}{flags}"
    body += [
        f'a, b, shape = _tgemm_operands("{site.form}", a, b)',
        f"return _tgemm_launch({launch})",
    ]
    params = ["a", "b", *tensor_names, *scalar_names]
    lines = [f"def {name}(self, {', '.join(params)}):", f'    """{doc}"""']
    lines += [f"    {line}" for line in body]
    return "\n".join(f"    {line}" for line in lines) + "\n"


def _tuple(names: list[str]) -> str:
    return f"({names[0]},)" if len(names) == 1 else f"({', '.join(names)})"
