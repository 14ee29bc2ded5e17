import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Simple model that returns both the mean and the (unbiased) variance over a dimension,
    as a tuple.
    """

    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """
        Args:
            x (torch.Tensor): Input tensor of shape (batch_size, features, length).

        Returns:
            tuple: (mean, variance), each of shape (batch_size, length).
        """
        return torch.mean(x, dim=self.dim), torch.var(x, dim=self.dim)


batch_size = 16
features = 64
length = 32


def get_inputs():
    x = torch.randn(batch_size, features, length)
    return [x]


def get_init_inputs():
    return [1]
