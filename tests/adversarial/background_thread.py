# problem: linear_relu.py
# static: thread-or-process
# runtime: not-correct
# Returns at once and lets a thread fill the output later, so a timer sees nothing.
import threading
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        out = torch.empty(x.shape[0], self.linear.out_features)

        def work():
            time.sleep(0.2)
            out.copy_(torch.relu(self.linear(x)))

        threading.Thread(target=work, daemon=True).start()
        return out
