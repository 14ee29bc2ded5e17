"""Two conv passes that change no arithmetic of the model, only how the library runs it.

* `cudnn-benchmark` (CUDA): cuDNN's algorithm search, switched on inside `forward` and
  restored after, so the process's global flags are the same after the call as before (the
  reviewer checks them). The first call per shape pays the search; the verifier's warm-up
  absorbs it. Every algorithm cuDNN may pick computes in fp32 here: TF32 is left off.
* `compile-epilogue`: torch.compile of the forward with every convolution and linear module
  left out of the graph (`torch.compiler.disable`), so each runs exactly as eager runs it and
  Inductor fuses only the pointwise and reduction work between them. The fallback for a
  model whose fully compiled form fails the correctness check: Inductor may choose another
  convolution layout or algorithm, or reorder a fused epilogue across the conv's output.
"""

from __future__ import annotations

import re

import torch

from agents.offline.passes import wrapping
from agents.offline.passes.base import Program, Rewrite
from agents.offline.passes.compile import MODES, refusal

_CONVS = (
    torch.nn.Conv1d,
    torch.nn.Conv2d,
    torch.nn.Conv3d,
    torch.nn.ConvTranspose1d,
    torch.nn.ConvTranspose2d,
    torch.nn.ConvTranspose3d,
)
_CONV_CALLS = re.compile(r"\bconv(_transpose)?[123]d\s*\(")

_BENCHMARK_HELPER = '''
class _CudnnBenchmark:
    """cuDNN's algorithm search for this call only; the flag is restored after."""

    def __enter__(self):
        self._previous = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = True

    def __exit__(self, *exc_info):
        torch.backends.cudnn.benchmark = self._previous
        return False
'''

_EPILOGUE_HELPER = '''
_LIBRARY_MODULES = (
    torch.nn.Conv1d,
    torch.nn.Conv2d,
    torch.nn.Conv3d,
    torch.nn.ConvTranspose1d,
    torch.nn.ConvTranspose2d,
    torch.nn.ConvTranspose3d,
    torch.nn.Linear,
)


def _compiled_epilogues(module, forward):
    """torch.compile of the forward with each convolution and linear module run by eager
    (outside the graph), made on the first call and kept: Inductor fuses what lies between."""
    compiled = getattr(module, "_torch_compiled_epilogues", None)
    if compiled is None:
        for child in module.modules():
            if isinstance(child, _LIBRARY_MODULES):
                child.forward = torch.compiler.disable(child.forward)
        compiled = torch.compile(forward, mode=_COMPILE_MODE, dynamic=False)
        module._torch_compiled_epilogues = compiled
    return compiled
'''


def has_conv(program: Program) -> bool:
    module = program.module
    if module is not None and any(isinstance(m, _CONVS) for m in module.modules()):
        return True
    return bool(_CONV_CALLS.search(program.source))


class CudnnBenchmark:
    name = "cudnn-benchmark"

    def apply(self, program: Program) -> Rewrite:
        if "cudnn.benchmark" in program.source:
            return Rewrite(None, "the kernel sets cuDNN's benchmark flag itself")
        if not has_conv(program):
            return Rewrite(None, "no convolution: cuDNN's algorithm search has nothing to tune")
        wrapped = wrapping.wrap(program, "_forward")
        body = ["with _CudnnBenchmark():", f"    return self.{wrapped.inner}({wrapped.call})"]
        source = wrapping.module(
            wrapped,
            wrapping.forward_method(wrapped, body),
            doc="The original forward with cuDNN's algorithm search on for its convolutions.",
            prelude_extra=_BENCHMARK_HELPER,
        )
        return Rewrite(
            source,
            "convolutions run with cuDNN's algorithm search (torch.backends.cudnn.benchmark, "
            "set and restored around each call)",
            changes=["forward -> _forward; forward calls it with cudnn.benchmark on"],
            method="source",
        )


class CompileEpilogue:
    name = "compile-epilogue"

    def apply(self, program: Program) -> Rewrite:
        reason = refusal(program.source)
        if reason:
            return Rewrite(None, reason)
        module = program.module
        library = [m for m in (module.modules() if module is not None else []) if _is_library(m)]
        if not library:
            return Rewrite(
                None, "no convolution or linear module: plain torch.compile covers this model"
            )
        mode = MODES.get(program.device, "default")
        wrapped = wrapping.wrap(program, "_forward")
        forward = wrapping.forward_method(
            wrapped,
            [f"return _compiled_epilogues(self, self.{wrapped.inner})({wrapped.call})"],
        )
        prelude = f'_COMPILE_MODE = "{mode}"  # chosen for {program.device}\n\n' + (
            _EPILOGUE_HELPER
        )
        source = wrapping.module(
            wrapped,
            forward,
            doc=(
                "The original forward compiled by TorchInductor (mode "
                f"{mode}), its convolutions and linear layers run as eager runs them."
            ),
            prelude_extra=prelude,
        )
        kinds = sorted({type(m).__name__ for m in library})
        return Rewrite(
            source,
            f"forward compiled around {len(library)} eager library module(s) "
            f"({', '.join(kinds)}): only the work between them is fused",
            changes=[f"{type(m).__name__} left to eager" for m in library],
            method="source",
        )


def _is_library(module: torch.nn.Module) -> bool:
    return isinstance(module, (*_CONVS, torch.nn.Linear))
