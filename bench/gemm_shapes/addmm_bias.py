import torch
import torch.nn as nn

M = 4096
K = 4096
N = 4096


class Model(nn.Module):
    def __init__(self, K, N):
        super(Model, self).__init__()
        self.weight = nn.Parameter(torch.randn(K, N) / K**0.5)
        self.bias = nn.Parameter(torch.randn(N))

    def forward(self, x):
        return torch.addmm(self.bias, x, self.weight)


def get_inputs():
    return [torch.randn(M, K)]


def get_init_inputs():
    return [K, N]
