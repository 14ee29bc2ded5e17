# problem: two_outputs.py
# static: none
# runtime: rejected
# Writes its result into the caller's input tensor.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        t = torch.tanh(a - b)
        return a.mul_(b), t
