import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Simple model that performs a convolution, applies GELU, and scales each channel by a
    learnable factor.
    """

    def __init__(self, in_channels, out_channels, kernel_size, scale_shape):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scale = nn.Parameter(torch.randn(scale_shape))

    def forward(self, x):
        x = self.conv(x)
        x = torch.nn.functional.gelu(x)
        x = x * self.scale
        return x


batch_size = 4
in_channels = 3
out_channels = 8
height, width = 24, 24
kernel_size = 3
scale_shape = (out_channels, 1, 1)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale_shape]
