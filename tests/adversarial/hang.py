# problem: linear_relu.py
# static: none
# runtime: timeout
# limits: run=6
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()

    def forward(self, x):
        while True:
            x = x + 1
