# problem: linear_relu.py
# static: reference-model
# runtime: rejected
# Sends a 20 GB reply frame in place of its output (25 messages of 20 MB once took the
# parent from 114 MB to 673 MB): the parent must refuse it by its header, unread.
import struct
import sys

import torch
import torch.nn as nn

for _name, _module in list(sys.modules.items()):
    if _name.endswith("verify.serve"):
        _handle = _module.handle

        def _huge(side, op, header, payload, _handle=_handle):
            answer, data = _handle(side, op, header, payload)
            if op == "fetch":
                return {
                    **answer,
                    "specs": [
                        {
                            "dtype": "float32",
                            "shape": [5 * 1024**3],
                            "device": "cpu",
                            "kind": "tensor",
                        }
                    ],
                }, b"\0" * 20_000_000
            return answer, data

        _module.handle = _huge


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))
