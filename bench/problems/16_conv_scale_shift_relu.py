"""Conv2d, constant scale and shift (foldable into the conv weights), then ReLU."""

import torch
import torch.nn as nn

BATCH = 16
IN_CHANNELS = 16
OUT_CHANNELS = 32
KERNEL_SIZE = 3
HEIGHT = 64
WIDTH = 64
SCALE = 0.5
SHIFT = 0.1

GPU_SIZES = {"BATCH": 128, "IN_CHANNELS": 32, "OUT_CHANNELS": 64, "HEIGHT": 256, "WIDTH": 256}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale, shift):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scale = scale
        self.shift = shift

    def forward(self, x):
        x = self.conv(x)
        x = x * self.scale + self.shift
        return torch.relu(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE, SCALE, SHIFT]
