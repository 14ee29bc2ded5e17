"""Transformer MLP block: Linear, GELU, Linear, plus a residual connection."""

import torch
import torch.nn as nn

BATCH = 512
DIM = 512
HIDDEN = 2048

GPU_SIZES = {"BATCH": 8192, "DIM": 2048, "HIDDEN": 8192}


class Model(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(x)))


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [DIM, HIDDEN]
