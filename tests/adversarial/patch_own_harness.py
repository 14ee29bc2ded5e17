# problem: linear_relu.py
# static: reference-model
# runtime: not-correct
# Rewrites the harness inside its own process: every fingerprint and every fetched output is
# made to look like "the right answer" without computing it. Nothing it patches is in the
# parent's or the reference's process, so the data it sends is simply wrong.
import sys

import torch
import torch.nn as nn

for _name, _module in list(sys.modules.items()):
    if _name.endswith("verify.side"):
        _module.fingerprint = lambda value, seed, samples: [
            {
                "kind": "tensor",
                "numel": 6144,
                "sum": 0.0,
                "nan": 0,
                "inf": 0,
                "samples": [0.0] * samples,
            }
        ]
        _module.Side.changes = lambda self: []


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.out_features = out_features

    def forward(self, x):
        return torch.zeros(x.shape[0], self.out_features)
