"""Fusion: Linear followed by GELU (KernelBench L2 "Gemm_GELU"-style pattern)."""

import torch
import torch.nn as nn

BATCH = 256
IN_FEATURES = 1024
OUT_FEATURES = 2048

GPU_SIZES = {"BATCH": 4096, "IN_FEATURES": 8192, "OUT_FEATURES": 8192}


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
