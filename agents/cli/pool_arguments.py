"""The switches that choose an evaluation backend, shared by `optimize` and `bench
--optimize`; their dests are the request's field paths (`evaluation.eval_backend`)."""

from __future__ import annotations

import argparse

from agents.request.defaults import EVAL_BACKENDS


def add_pool_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, given_only: bool = False
) -> None:
    """--eval-backend and --ray-address. `given_only`: leave them out of the parsed
    arguments unless given (a config file's value then stands)."""
    parser.add_argument(
        "--eval-backend",
        dest="evaluation.eval_backend",
        choices=EVAL_BACKENDS,
        default=argparse.SUPPRESS if given_only else "local",
        help="where candidates are built and timed: 'local' (this machine) or 'ray' "
        "(a Ray cluster: --ray-address or RAY_ADDRESS, else a local Ray; default: local)",
    )
    parser.add_argument(
        "--ray-address",
        dest="evaluation.ray_address",
        default=argparse.SUPPRESS if given_only else None,
        metavar="ADDR",
        help="with --eval-backend ray: the cluster to join, e.g. ray://head:10001 or head:6379",
    )
