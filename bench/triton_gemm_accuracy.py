"""How accurate and how fast are the triton-gemm pass's kernels on the GPU? For each GEMM
problem of the suite (a file that calls nn.Linear, F.linear, matmul, bmm or addmm), the max
error against a float64 run of the reference of:

* the fp32 eager reference itself (cuBLAS SGEMM),
* the generated kernel with tl.dot input_precision "tf32x3" (what the pass writes),
* the same kernel with plain "tf32" (refused by the verifier; measured for contrast),
* the same kernel with "ieee" (fp32 products on CUDA cores),

with the verifier's band ratio (within the band at <= 1) and each kernel's speedup over
eager (median of timed calls after a warm-up that absorbs compilation and autotuning).

    python bench/triton_gemm_accuracy.py [--size gpu] [--only 09,10] [--out FILE] [--force]

Resumable: results go to --out after every measurement, and a rerun skips what is there
(--force measures again). Needs a CUDA GPU; elsewhere it exits with one line.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import importlib.util
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.offline.fx.tracing import apply_general_first
from agents.offline.passes.base import Program, Rewrite
from agents.offline.passes.triton_gemm import build
from agents.task import SourceFile, apply_size, build_model, call_factory, load_problem
from agents.verify.compare import compare_output, flatten

ROOT = Path(__file__).resolve().parents[1]
PRECISIONS = ("tf32x3", "tf32", "ieee")
GEMM = re.compile(r"\bnn\.Linear\b|\bF\.linear\b|\bmatmul\b|\bbmm\b|\baddmm\b")


class _AtPrecision:
    """The triton-gemm pass with tl.dot at another input precision."""

    name = "triton-gemm"

    def __init__(self, precision: str) -> None:
        self.precision = precision

    def apply(self, program: Program) -> Rewrite:
        return build(program, self.precision)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=Path, default=ROOT / "bench" / "problems")
    parser.add_argument("--size", choices=("gpu", "default"), default="gpu")
    parser.add_argument("--only", default="", help="comma-separated name prefixes, e.g. 09,10")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "triton_gemm_accuracy.json")
    parser.add_argument("--repeat", type=int, default=30, help="timed calls per measurement")
    parser.add_argument("--force", action="store_true", help="measure again what --out has")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("triton_gemm_accuracy.py: needs a CUDA GPU (torch sees none here)")
    import triton

    results = _load(args.out) if args.out.exists() and not args.force else {}
    results.setdefault("problems", {})
    results["meta"] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "size": args.size,
        "updated": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    wanted = [p for p in args.only.split(",") if p]
    paths = [
        path
        for path in sorted(args.problems.glob("*.py"))
        if GEMM.search(path.read_text()) and (not wanted or path.stem.startswith(tuple(wanted)))
    ]
    sources = args.out.parent / "triton_gemm_sources"
    sources.mkdir(parents=True, exist_ok=True)
    for path in paths:
        entry = results["problems"].setdefault(path.stem, {})
        try:
            _measure(path, entry, args, sources, lambda: _save(args.out, results))
        except Exception as error:  # one problem's failure must not cost the others
            entry["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
        _save(args.out, results)
        torch.cuda.empty_cache()
    _report(results)


def _measure(path: Path, entry: dict, args, sources: Path, save) -> None:
    if all(key in entry and "error" not in entry[key] for key in ("eager", *PRECISIONS)):
        print(f"{path.stem}: done already (--force to measure again)")
        return
    entry.pop("error", None)
    reference = SourceFile.from_path(path)
    problem = load_problem(reference)
    apply_size(problem, args.size, reference)
    torch.manual_seed(0)
    init = call_factory(problem.get_init_inputs, reference, "get_init_inputs")
    model = build_model(problem.model_class, init, reference).cuda()
    torch.manual_seed(1)
    inputs = [_cuda(x) for x in call_factory(problem.get_inputs, reference, "get_inputs")]
    with torch.no_grad():
        output = model(*inputs)
        wide = [x.double() if torch.is_tensor(x) and x.is_floating_point() else x for x in inputs]
        gold = flatten(copy.deepcopy(model).double()(*wide))
    eager_ms = _time_ms(model, inputs, args.repeat)
    entry["shapes"] = [list(x.shape) for x in inputs if torch.is_tensor(x)]
    eager = _errors(flatten(output), flatten(output), gold)
    entry["eager"] = {k: v for k, v in eager.items() if "band" not in k} | {"ms": eager_ms}
    program = Program(reference.text, "Model", model, inputs, init, "cuda")
    for precision in PRECISIONS:
        if precision in entry and "error" not in entry[precision]:
            continue
        started = time.perf_counter()
        rewrite = apply_general_first(_AtPrecision(precision), program)
        if rewrite.source is None:
            entry[precision] = {"error": rewrite.summary}
            save()
            continue
        file = sources / f"{path.stem}_{precision}.py"
        file.write_text(rewrite.source)  # @triton.jit reads each kernel's source from a file
        module = _import(file)
        new = module.ModelNew(*init).cuda()
        new.load_state_dict(model.state_dict())
        with torch.no_grad():
            candidate = flatten(new(*inputs))  # the first call autotunes
        first_s = time.perf_counter() - started
        ms = _time_ms(new, inputs, args.repeat)
        tuned = [
            str(getattr(value, "best_config", None))
            for key, value in sorted(vars(module).items())
            if key.startswith("_tgemm_kernel_")
        ]
        entry[precision] = {
            **_errors(candidate, flatten(output), gold),
            "ms": ms,
            "speedup_over_eager": eager_ms / ms,
            "first_call_s": round(first_s, 1),
            "sites": rewrite.changes,
            "tiles": tuned,
        }
        save()
        print(f"{path.stem} {precision}: {entry[precision]['speedup_over_eager']:.2f}x")


def _errors(outputs: list[Any], reference: list[Any], gold: list[Any]) -> dict[str, Any]:
    """Max abs and relative errors against float64, and the verifier's band ratio."""
    worst: dict[str, Any] = {"max_abs_error": 0.0, "max_rel_error": 0.0, "rel_l2_error": 0.0}
    worst["band_ratio"] = 0.0
    for out, ref, ref64 in zip(outputs, reference, gold, strict=True):
        diff = (out.double() - ref64).abs()
        scale = float(ref64.abs().max()) or 1.0
        found = compare_output(out, ref, ref64)
        worst["max_abs_error"] = max(worst["max_abs_error"], float(diff.max()))
        worst["max_rel_error"] = max(worst["max_rel_error"], float(diff.max()) / scale)
        worst["rel_l2_error"] = max(worst["rel_l2_error"], found.candidate_error or 0.0)
        worst["band_ratio"] = max(worst["band_ratio"], found.error_ratio or 0.0)
        worst["within_band"] = bool(found.float64_ok) and worst.get("within_band", True)
    return worst


def _time_ms(model: torch.nn.Module, inputs: list[Any], repeat: int) -> float:
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        torch.cuda.synchronize()
        times = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(*inputs)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def _cuda(value: Any) -> Any:
    return value.cuda() if torch.is_tensor(value) else value


def _import(file: Path):
    spec = importlib.util.spec_from_file_location(f"triton_gemm_{file.stem}", file)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"triton_gemm_accuracy.py: cannot resume from {path}: {error}") from None


def _save(path: Path, results: dict) -> None:
    """Atomically: an interrupted run leaves the last complete file."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(results, indent=2) + "\n")
    temporary.replace(path)


def _report(results: dict) -> None:
    header = f"{'problem':36s} {'eager err':>10s} " + " ".join(
        f"{p + ' err':>11s} {p + ' x':>9s}" for p in PRECISIONS
    )
    print(header)
    for name, entry in results["problems"].items():
        if "error" in entry:
            print(f"{name:36s} {entry['error']}")
            continue
        cells = [f"{entry.get('eager', {}).get('max_rel_error', float('nan')):10.2e}"]
        for precision in PRECISIONS:
            found = entry.get(precision, {})
            error = found.get("max_rel_error", float("nan"))
            cells.append(f"{error:11.2e} {found.get('speedup_over_eager', float('nan')):8.2f}x")
        print(f"{name:36s} " + " ".join(cells))


if __name__ == "__main__":
    main()
