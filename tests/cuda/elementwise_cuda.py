"""An honest CUDA load_inline rewrite: one fused kernel instead of three."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void fused_kernel(const float* a, const float* b, float* out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = a[i] * b[i] + a[i];
        out[i] = v > 0.0f ? v : 0.0f;
    }
}

torch::Tensor fused(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int64_t n = a.numel();
    int threads = 256;
    int blocks = (int)((n + threads - 1) / threads);
    fused_kernel<<<blocks, threads>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                      out.data_ptr<float>(), n);
    return out;
}
"""

CPP_SOURCE = "torch::Tensor fused(torch::Tensor a, torch::Tensor b);"

_extension = load_inline(
    name="kernel_agent_test_fused_elementwise",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["fused"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return _extension.fused(a.contiguous(), b.contiguous())
