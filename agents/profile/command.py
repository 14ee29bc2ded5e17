"""The `kernel-agent profile` subcommand: parse its arguments, profile, print.

agents/cli.py wires `add_profile_parser` and `run_profile` in; a ProfileError is a usage
error there (one line, exit status 2).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from agents.profile.api import DEVICES, ProfileError, profile_file
from agents.task import SIZES, SourceFile, TaskLoadError


def add_profile_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `profile FILE.py [options]` to a parser's subcommands and return it."""
    parser = subparsers.add_parser(
        "profile",
        help="show where a KernelBench problem's forward spends its time, line by line",
        description="Profile FILE's Model.forward in a sandbox: time per source line and aten "
        "op, FLOPs and bytes, against this machine's measured memory and matmul ceilings.",
    )
    parser.add_argument("file", metavar="FILE.py", help="a KernelBench-format problem")
    parser.add_argument(
        "--device", choices=DEVICES, default="cpu", help="profile on this device (default: cpu)"
    )
    parser.add_argument(
        "--size", choices=SIZES, default="default", help="gpu: apply the problem's GPU_SIZES"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--repeat", type=int, default=5, help="profiled forwards (default 5)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: all)")
    parser.add_argument("--plot", metavar="OUT.png", default=None, help="save a roofline plot")
    parser.add_argument(
        "--refresh-ceilings", action="store_true", help="measure the machine's ceilings again"
    )
    parser.add_argument(
        "--no-jail", action="store_true", help="skip the bubblewrap jail (limits still apply)"
    )
    return parser


def run_profile(args: argparse.Namespace) -> int:
    """Profile, then print a table (or JSON) and optionally save the plot. Returns 0."""
    try:
        source = SourceFile.from_path(args.file)
    except TaskLoadError as error:
        raise ProfileError(str(error)) from None
    profile = profile_file(
        source,
        device=args.device,
        size=args.size,
        threads=args.threads,
        repeat=args.repeat,
        use_jail=not args.no_jail,
        refresh_ceilings=args.refresh_ceilings,
    )
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
