# problem: linear_relu.py
# static: try-fallback
# runtime: correct
# A "fast path" that always fails, silently falling back to the plain computation.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        try:
            return torch.ops.kernel_agent_missing.fast_linear_relu(x)
        except Exception:
            return torch.relu(self.linear(x))
