"""`kernel-agent profile FILE.py[::NAME]`: where a problem's forward (or NAME, a function or
Triton launcher in FILE.py, as `optimize` names it) spends its time, line by line.

The arguments become a `ProfileRequest`; a ProfileError is a usage error (one line, exit
status 2, see agents/cli/__init__.py).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from agents.request.defaults import DEVICES, PROFILE_REPEAT
from agents.task import SIZE_HELP, SIZES


def add_profile_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `profile FILE.py [options]` to a parser's subcommands and return it."""
    parser = subparsers.add_parser(
        "profile",
        help="show where a KernelBench problem's forward spends its time, line by line",
        description="Profile FILE's Model.forward in a sandbox: time per source line and aten "
        "op, FLOPs and bytes, against this machine's measured memory and matmul ceilings.",
    )
    parser.add_argument(
        "file",
        metavar="FILE.py[::NAME]",
        help="a KernelBench-format problem, or NAME in FILE.py (a Triton launcher, a function)",
    )
    parser.add_argument(
        "--device", choices=DEVICES, default="cpu", help="profile on this device (default: cpu)"
    )
    parser.add_argument("--size", choices=SIZES, default="default", help=SIZE_HELP)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--repeat",
        type=int,
        default=PROFILE_REPEAT,
        help=f"profiled forwards (default {PROFILE_REPEAT})",
    )
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: all)")
    parser.add_argument(
        "--max-time",
        type=float,
        default=None,
        metavar="SECONDS",
        help="longest the profiled forwards may run (default: 60); raise it for large sizes",
    )
    parser.add_argument("--plot", metavar="OUT.png", default=None, help="save a roofline plot")
    parser.add_argument(
        "--refresh-ceilings", action="store_true", help="measure the machine's ceilings again"
    )
    parser.add_argument(
        "--no-jail",
        dest="jail",
        action="store_false",
        help="skip the bubblewrap jail (limits still apply)",
    )
    return parser


def run_profile(args: argparse.Namespace) -> int:
    """Profile, then print a table (or JSON) and optionally save the plot. Returns 0, or
    128 + the signal's number when Ctrl-C or SIGTERM stopped it (the child is killed)."""
    from agents.profile.api import ProfileError
    from agents.request.requests import ProfileRequest
    from agents.request.settings import RequestError
    from agents.targets.load import load_target

    try:
        target = load_target(args.file)
    except RequestError as error:
        raise ProfileError(str(error)) from None
    request = ProfileRequest(
        problem=target.problem,
        device=args.device,
        size=args.size,
        threads=args.threads,
        repeat=args.repeat,
        jail=args.jail,
        refresh_ceilings=args.refresh_ceilings,
    )
    profile = _profile_interruptibly(request, args.max_time)
    if args.plot:
        from agents.profile.plot import plot_roofline

        try:
            plot_roofline(profile, args.plot)
        except OSError as error:
            raise ProfileError(f"{args.plot}: cannot write the plot: {error}") from None
    if args.json:
        print(json.dumps(profile.to_json(), indent=2))
        return 0
    from agents.display import make_console
    from agents.profile.render import render_profile

    console = make_console()
    render_profile(profile, console)
    if args.plot:
        console.print(f"roofline plot: {args.plot}")
    return 0


def _profile_interruptibly(request, max_time: float | None):
    """The profile; when SIGINT or SIGTERM cancels it (its sandboxed child is killed),
    SystemExit with 128 + the signal's number."""
    from agents.cli.interrupt import Interrupts
    from agents.display import make_console
    from agents.profile.api import ProfileError, profile_request
    from agents.search.budget import CancelToken

    cancel = CancelToken()
    err = make_console(stderr=True)
    with Interrupts(cancel, lambda line: err.print(f"[yellow]{line}[/yellow]")) as interrupts:
        try:
            return profile_request(request, cancel.event, max_time=max_time)
        except ProfileError:
            if interrupts.interrupted:
                raise SystemExit(interrupts.exit_code(130)) from None
            raise
