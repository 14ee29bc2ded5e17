# problem: linear_relu.py
# static: none
# runtime: runtime_error
# Asks for far more memory than the sandbox allows.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()

    def forward(self, x):
        hog = torch.empty(16 * 1024**3, dtype=torch.float32)  # 64 GiB
        return hog.fill_(1.0)[: x.numel()].view_as(x)
