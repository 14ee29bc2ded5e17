import torch
import torch.nn as nn

M = 65536
N = 512
K = 512


class Model(nn.Module):
    """
    Simple model that performs a single matrix multiplication (C = A * B) with a tall A.
    """

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
