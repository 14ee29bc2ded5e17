"""Cheat (GPU): computes the right answer, then leaves a long chain of matrix products
running on a side stream after each call and stops its own harness from waiting for it,
so the work lands in the reference's timed runs instead of its own."""

import sys

import torch
import torch.nn as nn

torch.cuda.synchronize = lambda *args, **kwargs: None
for _name, _module in list(sys.modules.items()):
    if _name.endswith("verify.side"):
        _module.Side.settle = lambda self: None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = torch.cuda.Stream()
        self.hog = torch.randn(4096, 4096, device="cuda")

    def forward(self, a, b):
        out = torch.relu(a * b + a)
        with torch.cuda.stream(self.stream):
            x = self.hog
            for _ in range(40):
                x = x @ self.hog
        return out
