"""Softmax over the last dimension of a wide 2D tensor (KernelBench L1/23 pattern)."""

import torch
import torch.nn as nn

BATCH = 512
DIM = 16384

GPU_SIZES = {"BATCH": 4096, "DIM": 65536}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
