"""The command-line switches that choose an evaluation backend, shared by `optimize` and
`bench --optimize` (and, through `optimize`'s arguments, the language server's worker)."""

from __future__ import annotations

import argparse

from agents.evalpool.service import BACKENDS, PoolSettings, PoolSetupError


class PoolArgumentError(PoolSetupError):
    """A bad combination of backend switches: one line for the user."""


def add_pool_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--eval-backend",
        choices=BACKENDS,
        default="local",
        help="where candidates are built and timed: 'local' (this machine) or 'ray' "
        "(a Ray cluster: --ray-address or RAY_ADDRESS, else a local Ray)",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="with --eval-backend ray: the cluster to join, e.g. ray://head:10001 or head:6379",
    )


def pool_settings(args: argparse.Namespace, build_slots: int | None = None) -> PoolSettings:
    """PoolSettings from parsed arguments; PoolArgumentError for a contradiction."""
    backend = getattr(args, "eval_backend", None) or "local"
    address = getattr(args, "ray_address", None) or None
    if backend not in BACKENDS:
        raise PoolArgumentError(
            f"unknown evaluation backend {backend!r}: use one of {', '.join(BACKENDS)}"
        )
    if address and backend != "ray":
        raise PoolArgumentError("--ray-address needs --eval-backend ray")
    return PoolSettings(backend=backend, build_slots=build_slots, ray_address=address)
