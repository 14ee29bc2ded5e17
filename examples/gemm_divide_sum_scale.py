"""KernelBench level 2, problem 14 (Gemm_Divide_Sum_Scaling), at CPU size."""

import torch
import torch.nn as nn

BATCH_SIZE = 128
INPUT_SIZE = 512
HIDDEN_SIZE = 1024
SCALING_FACTOR = 1.5


class Model(nn.Module):
    """Matrix multiply, divide, sum over the hidden dimension, then scale."""

    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = torch.matmul(x, self.weight.T)
        x = x / 2
        x = torch.sum(x, dim=1, keepdim=True)
        x = x * self.scaling_factor
        return x


def get_inputs():
    return [torch.randn(BATCH_SIZE, INPUT_SIZE)]


def get_init_inputs():
    return [INPUT_SIZE, HIDDEN_SIZE, SCALING_FACTOR]
