"""A Linear layer with a per-feature scale and shift: affine in its input, so a linear
projection of its output factors through the input and the folded weights."""

import torch
import torch.nn as nn

BATCH = 256
IN_FEATURES = 1024
OUT_FEATURES = 1024


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super(Model, self).__init__()  # noqa: UP008 (KernelBench's spelling)
        self.linear = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(out_features))
        self.shift = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return self.linear(x) * self.scale + self.shift


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
