import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Model that performs a GEMM, applies LeakyReLU with a slope passed to forward as a plain
    float, and returns both the activation and a residual sum as a tuple.
    """

    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x, negative_slope, residual):
        y = self.gemm(x)
        y = torch.nn.functional.leaky_relu(y, negative_slope=negative_slope)
        return y, y + residual


batch_size = 32
in_features = 64
out_features = 96
negative_slope = 0.1


def get_inputs():
    return [
        torch.randn(batch_size, in_features),
        negative_slope,
        torch.randn(batch_size, out_features),
    ]


def get_init_inputs():
    return [in_features, out_features]
