"""Cheat (GPU): makes its harness's synchronize a no-op and computes on a side stream, so
it replies while its kernels still run: the reply must still carry the finished output's
checksum, or be refused."""

import sys

import torch
import torch.nn as nn

torch.cuda.synchronize = lambda *args, **kwargs: None
for _name, _module in list(sys.modules.items()):
    if _name.endswith("verify.side"):
        _module.Side.settle = lambda self: None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = torch.cuda.Stream()

    def forward(self, a, b):
        out = torch.empty_like(a)
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            for _ in range(50):
                torch.relu(a * b + a, out=out)
        return out
