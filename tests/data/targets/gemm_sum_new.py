"""gemm_sum rewritten by hand: the sum over hidden moves inside the gemm (a candidate for
`kernel-agent eval gemm_sum.py::gemm_sum gemm_sum_new.py`)."""

import torch


class ModelNew(torch.nn.Module):
    def __init__(self, *init_inputs):
        super().__init__()

    def forward(self, x, weight):
        return torch.matmul(x, weight.sum(0, keepdim=True).T) * 0.75
