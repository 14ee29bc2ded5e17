import torch
import torch.nn as nn

batch_size = 1024
in_features = 8192
out_features = 8192


class Model(nn.Module):
    """
    Gemm, then BatchNorm1d (training mode: batch statistics), GELU and ReLU.
    """

    def __init__(self, in_features, out_features, bn_eps=1e-5, bn_momentum=0.1):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.batch_norm = nn.BatchNorm1d(out_features, eps=bn_eps, momentum=bn_momentum)

    def forward(self, x):
        x = self.gemm(x)
        x = self.batch_norm(x)
        x = torch.nn.functional.gelu(x)
        x = torch.relu(x)
        return x


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
