# problem: linear_relu.py
# static: thread-or-process
# runtime: correct
# expect: true-speed
# A thread started at import recomputes every call's answer beside forward, hoping to hand
# back a precomputed output for an input seen before. Inputs are fresh on every call, so it
# never delivers; forward computes each answer itself and is correct. What it can buy is
# only what the machine's load lends it: with two busy processes on two cores it was
# measured at 21.5x (95% CI 4.6-109) by a timing that reported any ratio as a number.
import queue
import threading

import torch
import torch.nn as nn

_PENDING: queue.Queue = queue.Queue(maxsize=4)
_ANSWERS: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
DELIVERED = [0]


def _precompute() -> None:
    while True:
        module, x = _PENDING.get()
        with torch.no_grad():
            _ANSWERS[x.data_ptr()] = (x, torch.relu(module.linear(x)))
        while len(_ANSWERS) > 4:
            _ANSWERS.pop(next(iter(_ANSWERS)))


threading.Thread(target=_precompute, daemon=True).start()


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        seen = _ANSWERS.get(x.data_ptr())
        if seen is not None and torch.equal(seen[0], x):
            DELIVERED[0] += 1
            return seen[1].clone()
        try:
            _PENDING.put_nowait((self, x.clone()))
        except queue.Full:
            pass
        return torch.relu(self.linear(x))
