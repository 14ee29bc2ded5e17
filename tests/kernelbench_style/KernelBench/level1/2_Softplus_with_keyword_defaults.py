import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """
    Simple model that applies Softplus; beta and threshold come from keyword defaults.
    """

    def __init__(self, beta: float = 2.0, threshold: float = 10.0):
        super(Model, self).__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Applies Softplus to the input tensor.

        Args:
            x (torch.Tensor): Input tensor of any shape.

        Returns:
            torch.Tensor: Output tensor of the same shape as input.
        """
        return F.softplus(x, beta=self.beta, threshold=self.threshold)


batch_size = 16
dim = 1024


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []  # The keyword defaults are used
