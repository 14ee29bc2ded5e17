"""Fusion: conv2d, add a bias, scale, clamp to [0, 1] (KernelBench L2 conv-elementwise pattern)."""

import torch
import torch.nn as nn

BATCH = 16
IN_CHANNELS = 16
OUT_CHANNELS = 32
KERNEL_SIZE = 3
HEIGHT = 64
WIDTH = 64
SCALE = 0.5

GPU_SIZES = {"BATCH": 128, "IN_CHANNELS": 32, "OUT_CHANNELS": 64, "HEIGHT": 256, "WIDTH": 256}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.02)
        self.scale = scale

    def forward(self, x):
        x = self.conv(x)
        x = x + self.bias
        x = x * self.scale
        return torch.clamp(x, min=0.0, max=1.0)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE, SCALE]
