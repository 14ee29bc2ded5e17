"""Stacked reductions: sum over width, then max over height, then mean over channels."""

import torch
import torch.nn as nn

BATCH = 64
CHANNELS = 64
HEIGHT = 64
WIDTH = 128

GPU_SIZES = {"BATCH": 128, "CHANNELS": 128, "HEIGHT": 256, "WIDTH": 256}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = torch.sum(x, dim=3)
        x = torch.max(x, dim=2)[0]
        return torch.mean(x, dim=1)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return []
