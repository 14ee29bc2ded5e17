import torch
import torch.nn as nn

M = 1024
N = 1024
K = 16384


class Model(nn.Module):
    """
    Matrix multiplication with a large reduction dimension: few output tiles, a long K loop.
    """

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return A @ B


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
