import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Model that performs a transposed 2D convolution, adds a constant, and applies HardSwish.
    """

    def __init__(
        self, in_channels, out_channels, kernel_size, stride, padding, output_padding, add_value
    ):
        super(Model, self).__init__()
        self.conv_transpose = nn.ConvTranspose2d(
            in_channels,
            out_channels,
            kernel_size,
            stride=stride,
            padding=padding,
            output_padding=output_padding,
        )
        self.add_value = add_value

    def forward(self, x):
        x = self.conv_transpose(x)
        x = x + self.add_value
        x = torch.nn.functional.hardswish(x)
        return x


batch_size = 4
in_channels = 8
out_channels = 4
height, width = 12, 12
kernel_size = 3
stride = 2
padding = 1
output_padding = 1
add_value = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding, add_value]
