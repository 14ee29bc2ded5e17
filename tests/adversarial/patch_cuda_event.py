# problem: linear_relu.py
# static: patch-module
# runtime: correct
# expect: true-speed
# Replaces CUDA events with ones that report no elapsed time.
import torch
import torch.nn as nn


class _Event:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, *args):
        pass

    def elapsed_time(self, other):
        return 0.001


torch.cuda.Event = _Event


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))
