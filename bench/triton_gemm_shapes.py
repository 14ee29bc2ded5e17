"""Issue 31: does the triton-gemm rewrite beat eager cuBLAS SGEMM on the fp32 GEMM shape
classes of bench/gemm_shapes/, within the verifier's float64 band?

For each problem: the pass's rewrite, built as the sandboxed child builds it; its error
against a float64 run beside eager fp32's (the verifier's band ratio: within the band at <= 1;
dropout is set to p=0 for this check only, since its mask depends on the dtype); eager and
rewrite times (triton.testing.do_bench, CUDA events, median, after a first call that
autotunes) and TFLOP/s; the tile autotuning chose and every tile's time from autotuning;
and the rewrite's time with its matrix inputs in column-major layout (same values, other
strides), which shows whether an operand layout costs the kernel.

    python bench/triton_gemm_shapes.py [--only bmm,tall] [--all-tiles] [--warm N] [--out FILE]

--warm N first runs every problem once in N processes at a time, so Triton's disk cache holds
each tile compiled and the timed pass loads them (each worker prints its cold first-call
seconds: autotuning every tile, compiles included). --all-tiles times every tile of the table
instead of those `_tgemm_prune` keeps. --variant wrap is an experiment on the generated text:
row and column indices wrapped modulo M and N instead of masked in the K loop (Triton's
tutorial's form). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.offline.fx.tracing import apply_general_first  # noqa: E402
from agents.offline.passes.base import Program  # noqa: E402
from agents.offline.passes.triton_gemm import TritonGemm  # noqa: E402
from agents.offline.passes.triton_gemm_kernel import describe_config  # noqa: E402
from agents.verify.compare import compare_output, flatten  # noqa: E402

PROBLEMS = ROOT / "bench" / "gemm_shapes"
VARIANTS = {
    "wrap": [
        (
            "rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\n",
            "rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M\n",
        ),
        (
            "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)\n",
            "rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N\n",
        ),
        ("a = tl.load(a_ptrs, mask=rm[:, None] < M, other=0.0)", "a = tl.load(a_ptrs)"),
        ("b = tl.load(b_ptrs, mask=rn[None, :] < N, other=0.0)", "b = tl.load(b_ptrs)"),
    ]
}


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gemm_flops(model: torch.nn.Module, inputs: list[torch.Tensor]) -> float:
    """2*M*N*K summed over the forward's matrix products, counted by torch's FLOP counter."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(*inputs)
    return float(counter.get_total_flops())


def _dropouts_off(models: list[torch.nn.Module]) -> list[tuple[torch.nn.Module, float]]:
    """Set every Dropout's p to 0; each module with its old p, to restore."""
    old = []
    for model in models:
        for module in model.modules():
            if isinstance(module, torch.nn.modules.dropout._DropoutNd):
                old.append((module, module.p))
                module.p = 0.0
    return old


def _column_major(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.dim() >= 2:
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    return x


def measure(path: Path, all_tiles: bool, workdir: Path, variant: str = "") -> dict[str, Any]:
    import triton

    text = path.read_text()
    problem = _load(path, f"problem_{path.stem}")
    with torch.device("cuda"):
        torch.manual_seed(0)
        init = problem.get_init_inputs()
        model = problem.Model(*init)
        torch.manual_seed(1)
        inputs = problem.get_inputs()
    row: dict[str, Any] = {"problem": path.stem}
    started = time.perf_counter()
    result = apply_general_first(TritonGemm(), Program(text, "Model", model, inputs, init, "cuda"))
    row["build_s"] = round(time.perf_counter() - started, 2)
    row["summary"] = result.summary
    if result.source is None:
        return row
    source = result.source
    for old, replacement in VARIANTS.get(variant, []):
        if old not in source:
            raise ValueError(f"variant {variant}: {old!r} is not in the generated source")
        source = source.replace(old, replacement)
    row["variant"] = variant
    file = workdir / f"candidate_{path.stem}{variant}.py"
    file.write_text(source)
    candidate = _load(file, f"candidate_{path.stem}{variant}")
    new = candidate.ModelNew(*init).cuda()
    new.load_state_dict(model.state_dict())
    kernels = [v for k, v in sorted(vars(candidate).items()) if k.startswith("_tgemm_kernel_")]
    if all_tiles:
        for kernel in kernels:
            kernel.early_config_prune = None
    with torch.no_grad():
        torch.cuda.synchronize()
        started = time.perf_counter()
        new(*inputs)
        torch.cuda.synchronize()
        row["first_call_s"] = round(time.perf_counter() - started, 2)
        row["tiles"] = [
            {
                "kernel": index,
                "chosen": describe_config({**k.best_config.kwargs, **_launch(k.best_config)}),
                "timings": {
                    describe_config({**c.kwargs, **_launch(c)}): round(float(t[0]), 4)
                    for c, t in (getattr(k, "configs_timings", None) or {}).items()
                },
            }
            for index, k in enumerate(kernels)
        ]
        old = _dropouts_off([model, new])
        torch.manual_seed(2)
        ref = flatten(model(*inputs))
        torch.manual_seed(2)
        out = flatten(new(*inputs))
        wide = copy.deepcopy(model).double()
        torch.manual_seed(2)
        gold = flatten(wide(*[x.double() if x.is_floating_point() else x for x in inputs]))
        del wide
        found = [compare_output(o, r, g) for o, r, g in zip(out, ref, gold, strict=True)]
        del ref, out, gold
        for module, p in old:
            module.p = p
        row["float64_ok"] = all(f.float64_ok for f in found)
        row["band_ratio"] = max(f.error_ratio for f in found)
        row["error"] = max(f.candidate_error for f in found)
        row["eager_error"] = max(f.reference_error for f in found)
        flops = _gemm_flops(model, inputs)
        eager = triton.testing.do_bench(lambda: model(*inputs), warmup=25, rep=200)
        ours = triton.testing.do_bench(lambda: new(*inputs), warmup=25, rep=200)
        strided = [_column_major(x) for x in inputs]
        ours_cm = triton.testing.do_bench(lambda: new(*strided), warmup=25, rep=200)
        eager_cm = triton.testing.do_bench(lambda: model(*strided), warmup=25, rep=200)
    row |= {
        "eager_ms": round(eager, 4),
        "triton_ms": round(ours, 4),
        "speedup": round(eager / ours, 3),
        "eager_tflops": round(flops / eager / 1e9, 1),
        "triton_tflops": round(flops / ours / 1e9, 1),
        "column_major_eager_ms": round(eager_cm, 4),
        "column_major_triton_ms": round(ours_cm, 4),
        "gemm_gflop": round(flops / 1e9, 1),
    }
    return row


def _launch(config: Any) -> dict[str, int]:
    return {"num_warps": int(config.num_warps), "num_stages": int(config.num_stages)}


def _warm(paths: list[Path], processes: int, all_tiles: bool) -> None:
    """Run each problem once in its own process, `processes` at a time: Triton's disk cache
    then holds every tile compiled."""
    pending = list(paths)
    running: list[tuple[Path, subprocess.Popen[str], float]] = []
    while pending or running:
        while pending and len(running) < processes:
            path = pending.pop(0)
            command = [sys.executable, __file__, "--only", path.stem, "--first-call-only"]
            command += ["--all-tiles"] if all_tiles else []
            process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
            running.append((path, process, time.perf_counter()))
        for entry in list(running):
            path, process, started = entry
            if process.poll() is not None:
                output = (process.stdout.read() if process.stdout else "").strip()
                seconds = time.perf_counter() - started
                print(f"warm {path.stem}: {seconds:.1f} s, rc {process.returncode} {output}")
                running.remove(entry)
        time.sleep(0.5)


def _first_call_only(path: Path, all_tiles: bool) -> None:
    text = path.read_text()
    problem = _load(path, f"problem_{path.stem}")
    with torch.device("cuda"):
        torch.manual_seed(0)
        init = problem.get_init_inputs()
        model = problem.Model(*init)
        inputs = problem.get_inputs()
    result = apply_general_first(TritonGemm(), Program(text, "Model", model, inputs, init, "cuda"))
    if result.source is None:
        print(f"declined: {result.summary}")
        return
    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / f"candidate_{path.stem}.py"
        file.write_text(result.source)
        candidate = _load(file, f"candidate_{path.stem}")
        if all_tiles:
            for name, kernel in vars(candidate).items():
                if name.startswith("_tgemm_kernel_"):
                    kernel.early_config_prune = None
        new = candidate.ModelNew(*init).cuda()
        started = time.perf_counter()
        with torch.no_grad():
            new(*inputs)
        torch.cuda.synchronize()
        print(f"cold first call {time.perf_counter() - started:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated parts of problem names")
    parser.add_argument("--all-tiles", action="store_true")
    parser.add_argument("--warm", type=int, default=0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--variant", default="", choices=["", *VARIANTS])
    parser.add_argument("--first-call-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("triton_gemm_shapes needs a CUDA GPU")
    wanted = [w for w in args.only.split(",") if w]
    paths = sorted(
        p for p in PROBLEMS.glob("*.py") if not wanted or any(w in p.stem for w in wanted)
    )
    if args.first_call_only:
        for path in paths:
            _first_call_only(path, args.all_tiles)
        return
    if args.warm:
        _warm(paths, args.warm, args.all_tiles)
    device = torch.cuda.get_device_name()
    print(f"# {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {device}")
    print(f"# torch {torch.__version__}")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for path in paths:
            try:
                row = measure(path, args.all_tiles, Path(folder), args.variant)
            except Exception as error:  # one problem's failure is a row, not the end
                row = {"problem": path.stem, "error_text": f"{type(error).__name__}: {error}"}
            rows.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
            if args.out:
                args.out.write_text(json.dumps({"device": device, "rows": rows}, indent=1))
    print(
        "\n| problem | eager ms | triton-gemm ms | speedup | TFLOP/s eager / ours | band ratio "
        "(error, eager's) | tile | first call s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        if "speedup" not in row:
            print(f"| {row['problem']} | {row.get('error_text') or row.get('summary')} |")
            continue
        tiles = "; ".join(t["chosen"] for t in row["tiles"])
        print(
            f"| {row['problem']} | {row['eager_ms']:.3f} | {row['triton_ms']:.3f} | "
            f"{row['speedup']:.2f}x | {row['eager_tflops']} / {row['triton_tflops']} | "
            f"{row['band_ratio']:.3f} ({row['error']:.1e}, {row['eager_error']:.1e}) | "
            f"{tiles} | {row['first_call_s']} |"
        )


if __name__ == "__main__":
    main()
