# problem: linear_relu.py
# static: none
# runtime: correct
# expect: true-speed
# Memoises outputs by the bytes of its input. The old timing loop fed one input again and
# again, so every timed call was a cache hit (4-26x with no kernel). With fresh inputs on every
# timed run it must compute, and its speed is the reference's.
import hashlib

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.memo = {}

    def forward(self, x):
        key = hashlib.sha1(x.detach().contiguous().numpy().tobytes()).hexdigest()
        if key not in self.memo:
            self.memo[key] = torch.relu(self.linear(x))
        return self.memo[key].clone()
