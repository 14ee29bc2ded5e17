"""Square matrix multiply C = A @ B (KernelBench L1/1 pattern)."""

import torch
import torch.nn as nn

N = 1024

GPU_SIZES = {"N": 8192}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
