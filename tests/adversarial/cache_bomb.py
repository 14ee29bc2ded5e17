# problem: linear_relu.py
# static: none
# runtime: rejected
# limits: cache=64M
# Fills its compiler cache (which once every jail shared, with no quota) while it builds.
import os
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        where = os.environ.get("TORCH_EXTENSIONS_DIR") or os.environ.get("TRITON_CACHE_DIR")
        os.makedirs(where, exist_ok=True)
        chunk = b"\0" * (1 << 20)
        for index in range(400):
            with open(os.path.join(where, f"blob{index}.bin"), "wb") as handle:
                handle.write(chunk)
        time.sleep(5)

    def forward(self, x):
        return torch.relu(self.linear(x))
