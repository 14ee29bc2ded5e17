# problem: linear_relu.py
# static: none
# runtime: timeout
# limits: build=15
# Never finishes building.
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        while True:
            pass

    def forward(self, x):
        return x
