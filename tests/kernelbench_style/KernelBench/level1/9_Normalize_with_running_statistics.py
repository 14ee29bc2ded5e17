import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Normalizes the input with fixed statistics kept in registered buffers (not parameters).
    """

    def __init__(self, num_features: int, eps: float = 1e-5):
        super(Model, self).__init__()
        self.eps = eps
        self.register_buffer("running_mean", torch.linspace(-0.5, 0.5, num_features))
        self.register_buffer("running_var", torch.linspace(0.5, 1.5, num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): Input tensor of shape (batch_size, num_features).

        Returns:
            torch.Tensor: The normalized tensor, same shape as x.
        """
        return (x - self.running_mean) / torch.sqrt(self.running_var + self.eps)


batch_size = 64
num_features = 256


def get_inputs():
    x = torch.randn(batch_size, num_features)
    return [x]


def get_init_inputs():
    return [num_features]
