"""Standard 2D convolution, 3 input channels, square kernel (KernelBench L1/55 pattern)."""

import torch
import torch.nn as nn

BATCH = 4
IN_CHANNELS = 3
OUT_CHANNELS = 64
KERNEL_SIZE = 3
HEIGHT = 128
WIDTH = 128

GPU_SIZES = {"BATCH": 128, "HEIGHT": 256, "WIDTH": 256}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE]
