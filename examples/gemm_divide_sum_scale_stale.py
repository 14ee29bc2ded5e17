"""A tempting but wrong rewrite: it folds the weight once at __init__, so it is right on the
weights it was built with and silently wrong after `load_state_dict` loads a checkpoint.
The verifier's reload check catches it."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size))
        self.scaling_factor = scaling_factor
        self.folded = None

    def forward(self, x):
        if self.folded is None:
            self.folded = self.weight.detach().sum(dim=0) * (self.scaling_factor / 2)
        return (x @ self.folded).unsqueeze(1)
