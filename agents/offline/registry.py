"""Pass name → pass. Names are the skills' `offline_pass` values; imported lazily, since the
passes import torch and run only inside the sandbox child."""

from __future__ import annotations

import importlib

from agents.offline.passes.base import RewritePass

PASSES: dict[str, tuple[str, str]] = {
    "equality-saturation": ("agents.offline.egraph.saturate", "EqualitySaturation"),
    "size1-reduction": ("agents.offline.passes.algebra", "Size1Reduction"),
    "library-substitution": ("agents.offline.passes.library", "LibrarySubstitution"),
    "channels-last": ("agents.offline.passes.memory_format", "ChannelsLast"),
    "torch-compile": ("agents.offline.passes.compile", "TorchCompile"),
    "compile-epilogue": ("agents.offline.passes.conv_tuning", "CompileEpilogue"),
    "cudnn-benchmark": ("agents.offline.passes.conv_tuning", "CudnnBenchmark"),
    "cuda-graphs": ("agents.offline.passes.cuda_graphs", "CudaGraphs"),
    "cpp-elementwise": ("agents.offline.passes.cpp_elementwise", "CppElementwise"),
    "triton-gemm": ("agents.offline.passes.triton_gemm", "TritonGemm"),
}
"""Every pass the offline executor can run. A pass name here that no skill names is never
planned; a skill's offline_pass that is not here is a skill-library error (tested)."""

DEVICE_ONLY = {"cuda-graphs": "cuda", "cpp-elementwise": "cpu", "cudnn-benchmark": "cuda"}
DEVICE_ONLY["triton-gemm"] = "cuda"  # Triton kernels; the CPU interpreter is for tests only


def get_pass(name: str) -> RewritePass:
    if name not in PASSES:
        raise KeyError(f"unknown offline pass {name!r}: known passes are {', '.join(PASSES)}")
    module, attribute = PASSES[name]
    return getattr(importlib.import_module(module), attribute)()
