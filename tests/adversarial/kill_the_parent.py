# problem: linear_relu.py
# static: exit-call
# runtime: compile_error
# Kills the process that started it, and that process's whole group (the CLI, the server's
# worker). Without the jail's PID namespace only the seccomp filter stands in its way.
import os
import signal

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        parent = os.getppid()
        for attempt in (
            lambda: os.kill(parent, signal.SIGKILL),
            lambda: os.killpg(os.getpgid(parent), signal.SIGKILL),
        ):
            try:
                attempt()
            except OSError:
                pass
        raise RuntimeError("still here: the parent could not be killed")

    def forward(self, x):
        return x
