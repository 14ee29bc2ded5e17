# problem: linear_relu.py
# static: dynamic-code
# runtime: runtime_error
# Dereferences a null pointer inside forward.
import ctypes

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()

    def forward(self, x):
        ctypes.memset(0, 1, 64)
        return x
