"""A verified rewrite of gemm_divide_sum_scale.py: the sum over the GEMM's output dimension
commutes with the GEMM, so sum the weight's rows first and do a matrix-vector product.
The weight stays a parameter under the same name, so checkpoints still load."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        summed = self.weight.sum(dim=0)
        return (x @ summed).unsqueeze(1) * (self.scaling_factor / 2)
