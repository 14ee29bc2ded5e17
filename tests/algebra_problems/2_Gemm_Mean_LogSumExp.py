import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Model that performs a matrix multiplication, averages over the features, and applies
    LogSumExp over the resulting dimension.
    """

    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)  # (batch_size, out_features)
        x = torch.mean(x, dim=1, keepdim=True)  # (batch_size, 1)
        x = torch.logsumexp(x, dim=1, keepdim=True)  # (batch_size, 1)
        return x


batch_size = 512
in_features = 2048
out_features = 2048


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
