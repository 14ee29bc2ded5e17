"""Linear, then a constant scale and shift that fold into the weight and bias."""

import torch
import torch.nn as nn

BATCH = 256
IN_FEATURES = 1024
OUT_FEATURES = 1024
SCALE = 2.5
SHIFT = -0.75

GPU_SIZES = {"BATCH": 4096, "IN_FEATURES": 8192, "OUT_FEATURES": 8192}


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale, shift):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale
        self.shift = shift

    def forward(self, x):
        x = self.linear(x)
        x = x * self.scale
        return x + self.shift


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES, SCALE, SHIFT]
