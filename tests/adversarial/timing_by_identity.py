# problem: linear_relu.py
# static: none
# runtime: correct
# expect: true-speed
# Guesses that a call is timed when its input sits where the last one did (the old loop
# reused one tensor), and then returns its last output without computing. Timed inputs are
# fresh and checksummed now: the guess never pays.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.last = None
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.last is not None and self.calls > 14 and self.last[0] == x.data_ptr():
            return self.last[1]
        out = torch.relu(self.linear(x))
        self.last = (x.data_ptr(), out)
        return out
