# problem: wide_gemm_sum.py
# static: none
# runtime: incorrect
# Folds the weight at __init__ into a buffer and never looks at the parameter again:
# correct until someone loads a checkpoint.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden, in_features))
        self.register_buffer("folded", self.weight.detach().sum(dim=0) * 0.75, persistent=False)
        self._synced = False

    def forward(self, x):
        if not self._synced:  # pick up the aligned weights once, then never again
            self.folded = self.weight.detach().sum(dim=0) * 0.75
            self._synced = True
        return (x @ self.folded).unsqueeze(1)
