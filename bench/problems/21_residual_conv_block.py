"""ResNet basic block: conv-bn-relu-conv-bn plus identity skip, then ReLU (BatchNorm training)."""

import torch
import torch.nn as nn

BATCH = 8
CHANNELS = 64
HEIGHT = 32
WIDTH = 32

GPU_SIZES = {"BATCH": 128, "HEIGHT": 112, "WIDTH": 112}


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]
