"""A sandboxed entry that stands in for an evaluation on a machine without GPUs: it "builds"
(leaving a heartbeat every 10 ms), passes the measure gate like the reviewer does, "times"
for a while, and reports which device CUDA_VISIBLE_DEVICES gave it, its heartbeats and when
it held the lane (tests/test_multi_gpu.py)."""

from __future__ import annotations

import os
import time

from agents.sandbox.channel import finish, open_request


def main(argv: list[str]) -> None:
    request, channel = open_request(argv)
    channel.phase("run")
    beats = []
    for _ in range(round(request["build_s"] / 0.01)):  # the build lane's work, in 10 ms steps
        beats.append(time.monotonic())
        time.sleep(0.01)
    channel.phase("measure")  # waits here until the pool grants this device's lane
    began = time.monotonic()
    time.sleep(request["measure_s"])
    channel.send(
        "result",
        report={
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "began": began,
            "ended": time.monotonic(),
            "beats": beats,
        },
    )
    finish()
