import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Simple model that performs a matrix-scalar multiplication (C = A * s); the scalar is a
    plain Python float passed to forward.
    """

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, s: float) -> torch.Tensor:
        """
        Performs the matrix-scalar multiplication.

        Args:
            A: Input matrix of shape (M, N)
            s: Scalar value

        Returns:
            C: Resulting matrix of shape (M, N)
        """
        return A * s


M = 128
N = 96


def get_inputs():
    A = torch.randn(M, N)
    s = 3.14
    return [A, s]


def get_init_inputs():
    return []  # No special initialization inputs needed
