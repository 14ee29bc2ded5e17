# problem: linear_relu.py
# static: none
# runtime: incorrect
# Returns a lazy tensor subclass that only computes when something looks at it.
import torch
import torch.nn as nn


class _Lazy(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x)).as_subclass(_Lazy)
