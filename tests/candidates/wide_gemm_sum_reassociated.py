import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden, in_features))

    def forward(self, x):
        return (x @ self.weight.sum(dim=0)).unsqueeze(1) * 0.75
