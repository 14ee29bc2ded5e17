import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Applies Dropout followed by a scale. The model is left in its default training mode,
    so dropout is active and draws random numbers on every call.
    """

    def __init__(self, dropout_p, scale):
        super(Model, self).__init__()
        self.dropout = nn.Dropout(dropout_p)
        self.scale = scale

    def forward(self, x):
        x = self.dropout(x)
        return x * self.scale


batch_size = 32
features = 512
dropout_p = 0.25
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [dropout_p, scale]
