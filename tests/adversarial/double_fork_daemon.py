# problem: linear_relu.py
# static: thread-or-process
# runtime: rejected
# Double-forks a daemon in its own session on the first call, so that no parent-child
# relation ties it to the worker any more.
import os
import time

import torch
import torch.nn as nn


def _daemon():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.started = False

    def forward(self, x):
        if not self.started:
            self.started = True
            _daemon()
            time.sleep(0.05)
        return torch.relu(self.linear(x))
