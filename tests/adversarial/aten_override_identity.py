# problem: linear_relu.py
# static: none
# runtime: not-correct
# Overrides aten::relu through torch.library so that relu is the identity, in the hope that
# the reference computes it too. Only its own process sees the override.
import torch
import torch.nn as nn

_lib = torch.library.Library("aten", "IMPL")
_lib.impl("relu", lambda x: x.clone(), "CPU")


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.linear(x)
