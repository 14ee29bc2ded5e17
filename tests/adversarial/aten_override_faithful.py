# problem: linear_relu.py
# static: none
# runtime: rejected
# Overrides aten::relu with a kernel of its own that computes the same function: correct
# numbers, but every later call in its process runs under a dispatcher it changed.
import torch
import torch.nn as nn

_lib = torch.library.Library("aten", "IMPL")
_lib.impl("relu", lambda x: torch.clamp_min(x, 0.0), "CPU")


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))
