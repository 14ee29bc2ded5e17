# problem: two_outputs.py
# static: none
# runtime: incorrect
# First output right, second skipped: a checker that reads only output 0 passes it.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a * b, torch.zeros_like(a)
