"""Gemm, divide by 2, sum over hidden, scale, as a plain function: the sum commutes with
the gemm, so `kernel-agent optimize FILE.py::gemm_sum` finds an asymptotic win offline."""

import torch

BATCH = 256
INPUT_SIZE = 1024
HIDDEN_SIZE = 1024


def gemm_sum(x, weight):
    y = torch.matmul(x, weight.T)
    y = y / 2
    y = torch.sum(y, dim=1, keepdim=True)
    return y * 1.5


def get_inputs():
    return [torch.randn(BATCH, INPUT_SIZE), torch.randn(HIDDEN_SIZE, INPUT_SIZE)]
