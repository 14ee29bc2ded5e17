# problem: linear_relu.py
# static: none
# runtime: timeout
# limits: run=6
# Behaves through the trials, then hangs inside a timed call, holding the device.
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls > 20:
            while True:
                time.sleep(1)
        return torch.relu(self.linear(x))
