# problem: wide_gemm_sum.py
# static: precision-downgrade
# runtime: incorrect
# Does the GEMM in bfloat16 and casts back.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden, in_features))

    def forward(self, x):
        y = (x.bfloat16() @ self.weight.bfloat16().T).float()
        return y.sum(dim=1, keepdim=True) * 0.75
