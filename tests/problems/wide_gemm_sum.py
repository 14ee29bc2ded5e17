"""KernelBench L2/14's pattern at a width where fp32 rounding makes the strict rule flaky."""

import torch
import torch.nn as nn

BATCH = 32
IN_FEATURES = 4096
HIDDEN = 4096


class Model(nn.Module):
    def __init__(self, in_features, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden, in_features))

    def forward(self, x):
        x = torch.matmul(x, self.weight.T)
        x = x / 2
        return torch.sum(x, dim=1, keepdim=True) * 1.5


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN]
