"""Gemm, divide by 2, sum over hidden, scale: the sum commutes with the gemm (KernelBench L2/14)."""

import torch
import torch.nn as nn

BATCH = 256
INPUT_SIZE = 1024
HIDDEN_SIZE = 1024
SCALING_FACTOR = 1.5

GPU_SIZES = {"BATCH": 4096, "INPUT_SIZE": 8192, "HIDDEN_SIZE": 8192}


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = torch.matmul(x, self.weight.T)
        x = x / 2
        x = torch.sum(x, dim=1, keepdim=True)
        return x * self.scaling_factor


def get_inputs():
    return [torch.randn(BATCH, INPUT_SIZE)]


def get_init_inputs():
    return [INPUT_SIZE, HIDDEN_SIZE, SCALING_FACTOR]
