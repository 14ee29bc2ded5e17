"""Cheat: launch the work on a side stream and return at once, so a timer on the default
stream sees nothing; the output is read before the side stream is done."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = torch.cuda.Stream()

    def forward(self, a, b):
        out = torch.empty_like(a)
        with torch.cuda.stream(self.stream):
            for _ in range(20):
                torch.relu(a * b + a, out=out)
        return out
