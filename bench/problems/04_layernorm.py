"""LayerNorm over the trailing (features, height, width) dims (KernelBench L1/40 pattern)."""

import torch
import torch.nn as nn

BATCH = 16
FEATURES = 64
DIM1 = 64
DIM2 = 64

GPU_SIZES = {"BATCH": 16, "FEATURES": 64, "DIM1": 256, "DIM2": 256}


class Model(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(BATCH, FEATURES, DIM1, DIM2)]


def get_init_inputs():
    return [(FEATURES, DIM1, DIM2)]
