# problem: wide_gemm_sum.py
# static: reference-model
# runtime: correct
# expect: true-speed
# Answers a timed call at once and finishes the work only when its harness is asked to prove
# the output (by patching the harness in its own process). The proof is part of the timed
# request, so the work it put off is timed all the same.
import sys

import torch
import torch.nn as nn

_pending = {}
for _name, _module in list(sys.modules.items()):
    if _name.endswith("verify.side"):
        _checksum = _module.checksum

        def _late(value, seed, _checksum=_checksum):
            if "work" in _pending:
                side, work = _pending.pop("work")
                side.output = work()
                value = side.output
            return _checksum(value, seed)

        _module.checksum = _late
        _run = _module.Side.run

        def _lazy(self, clone, poison, _run=_run):
            if clone:
                return _run(self, clone, poison)
            inputs = self.inputs
            _pending["work"] = (self, lambda: self.model(*inputs))
            self.output = torch.empty(inputs[0].shape[0], 1)
            self.args = inputs

        _module.Side.run = _lazy


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden, in_features))

    def forward(self, x):
        return (x @ self.weight.T).sum(dim=1, keepdim=True) * 0.75
