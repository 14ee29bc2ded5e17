import torch
import torch.nn as nn


class Model(nn.Module):
    """
    A linear layer over a batch no machine holds: 2^22 rows of 2^16 features, 1 TB of input.
    """

    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


batch_size = 4194304
in_features = 65536
out_features = 256


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
