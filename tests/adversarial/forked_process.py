# problem: linear_relu.py
# static: thread-or-process
# runtime: rejected
# Leaves a forked child process running behind the call.
import os
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        return torch.relu(self.linear(x))
