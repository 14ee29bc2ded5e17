"""A plain square GEMM: its output is bilinear in its inputs, so a linear projection of it
factors through them (issue 32's red team projected the old checksum this way)."""

import torch
import torch.nn as nn

N = 512


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()  # noqa: UP008 (KernelBench's spelling)

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
