"""2D max pooling, kernel 2, stride 2 (KernelBench L1/42 pattern)."""

import torch
import torch.nn as nn

BATCH = 16
CHANNELS = 32
HEIGHT = 128
WIDTH = 128
KERNEL_SIZE = 2
STRIDE = 2

GPU_SIZES = {"BATCH": 128, "CHANNELS": 64, "HEIGHT": 256, "WIDTH": 256}


class Model(nn.Module):
    def __init__(self, kernel_size, stride):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [KERNEL_SIZE, STRIDE]
