"""Sum over the middle dimension with keepdim (KernelBench L1/47 pattern)."""

import torch
import torch.nn as nn

BATCH = 64
DIM1 = 256
DIM2 = 1024
REDUCE_DIM = 1

GPU_SIZES = {"BATCH": 128, "DIM1": 4096, "DIM2": 2048}


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)


def get_inputs():
    return [torch.randn(BATCH, DIM1, DIM2)]


def get_init_inputs():
    return [REDUCE_DIM]
