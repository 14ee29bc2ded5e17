"""Elementwise GELU (erf form) on a wide 2D tensor (KernelBench L1/26 pattern)."""

import torch
import torch.nn as nn

BATCH = 512
DIM = 16384

GPU_SIZES = {"BATCH": 4096, "DIM": 65536}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.nn.functional.gelu(x)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
