import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Model that performs a 3D convolution, takes the minimum along the depth dimension, and
    applies Tanh twice.
    """

    def __init__(self, in_channels, out_channels, kernel_size, dim):
        super(Model, self).__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.dim = dim

    def forward(self, x):
        x = self.conv(x)
        x = torch.min(x, dim=self.dim)[0]
        x = torch.tanh(x)
        x = torch.tanh(x)
        return x


batch_size = 2
in_channels = 3
out_channels = 8
D, H, W = 8, 12, 12
kernel_size = 3
dim = 2


def get_inputs():
    return [torch.randn(batch_size, in_channels, D, H, W)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, dim]
