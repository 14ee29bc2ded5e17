import torch
import torch.nn as nn

batch_size = 4096
in_features = 8192
out_features = 8192


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()
        self.fc = nn.Linear(in_features, out_features, bias=True)

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return []
