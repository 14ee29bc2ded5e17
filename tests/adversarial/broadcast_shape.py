# problem: wide_gemm_sum.py
# static: none
# runtime: incorrect
# Right values, wrong shape: (B,) instead of (B, 1); broadcasting would hide it.
import torch.nn as nn
import torch


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden, in_features))

    def forward(self, x):
        return (x @ self.weight.sum(dim=0)) * 0.75
