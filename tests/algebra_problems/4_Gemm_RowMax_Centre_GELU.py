import torch
import torch.nn as nn

batch_size = 128
in_features = 512
out_features = 512


class Model(nn.Module):
    """
    A linear layer, the largest feature of each row, that value minus its mean over the
    same (now size-1) dimension, then GELU.
    """

    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = torch.max(x, dim=1, keepdim=True)[0]
        x = x - torch.mean(x, dim=1, keepdim=True)
        x = torch.nn.functional.gelu(x)
        return x


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
