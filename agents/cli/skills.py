"""`kernel-agent skills list|show ID|match FILE.py`: the expert skill library and its gate."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from agents.display import make_console, plural

if TYPE_CHECKING:
    from rich.console import Console

JSON_HELP = "print JSON instead of text"


class SkillCommandError(Exception):
    """A usage error of the skills command: one line, exit status 2."""


def add_skills_parser(commands: Any) -> None:
    from agents.request.defaults import DEVICES
    from agents.task import SIZE_HELP, SIZES

    skills = commands.add_parser(
        "skills",
        help="the expert skill library: list, show, and match against a kernel",
        description="List the skill library, show one skill, or run the gate on FILE.py: "
        "profile it, read its code features, and print which skills it allows and why.",
    )
    actions = skills.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="every skill, by id")
    listing.add_argument("--target", default=None, help="only skills for this target")
    listing.add_argument("--json", action="store_true", help=JSON_HELP)
    show = actions.add_parser("show", help="one skill in full")
    show.add_argument("id", help="the skill's id, from `skills list`")
    show.add_argument("--json", action="store_true", help=JSON_HELP)
    match = actions.add_parser("match", help="which skills FILE.py's profile and code allow")
    match.add_argument("file", metavar="FILE.py", help="a KernelBench-format problem")
    match.add_argument(
        "--device", choices=DEVICES, default="cpu", help="profile on this device (default: cpu)"
    )
    match.add_argument("--size", choices=SIZES, default="default", help=SIZE_HELP)
    match.add_argument(
        "--no-profile",
        action="store_true",
        help="gate on code features only (no sandboxed profile run)",
    )
    match.add_argument("--json", action="store_true", help=JSON_HELP)


def run_skills(args: argparse.Namespace) -> int:
    from memory.skills_library import SkillError, load_skills, skill_to_json

    try:
        library = load_skills()
    except SkillError as error:
        raise SkillCommandError(str(error)) from None
    console = make_console()
    if args.action == "list":
        chosen = [s for s in library if args.target is None or args.target in s.targets]
        if args.json:
            print(json.dumps([skill_to_json(s) for s in chosen], indent=2))
            return 0
        from rich.table import Table

        table = Table(title=plural(len(chosen), "skill"), title_justify="left")
        for column in ("id", "targets", "title", "gain"):
            table.add_column(column)
        for skill in chosen:
            table.add_row(skill.id, ",".join(skill.targets), skill.title, skill.expected_gain)
        console.print(table)
        return 0
    if args.action == "show":
        skill = next((s for s in library if s.id == args.id), None)
        if skill is None:
            raise SkillCommandError(f"no skill {args.id!r}: see `kernel-agent skills list`")
        data = skill_to_json(skill)
        if args.json:
            print(json.dumps(data, indent=2))
        else:
            for key, value in data.items():
                console.print(f"[bold]{key}[/bold]: {value}")
        return 0
    return _match(args, library, console)


def _match(args: argparse.Namespace, library: Any, console: Console) -> int:
    from agents.task import SourceFile, TaskLoadError
    from memory.gate import gate

    try:
        source = SourceFile.from_path(args.file)
    except TaskLoadError as error:
        raise SkillCommandError(str(error)) from None
    profile = None
    if not args.no_profile:
        from agents.profile.api import profile_file

        profile = profile_file(source, device=args.device, size=args.size)
    metrics = profile.metrics() if profile is not None else None
    result = gate(metrics, source.text, device=args.device, skills=library)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return 0
    console.print(f"[bold]{args.file}[/bold]")
    for fact in result.facts.describe():
        console.print(f"  {fact}")
    console.print(f"\n[bold green]allowed[/bold green] ({len(result.allowed)}), best first:")
    for choice in result.allowed:
        console.print(f"  {choice.score:6.2f}  {choice.skill.id}: {choice.skill.title}")
        for reason in choice.why:
            console.print(f"            {reason}")
    console.print(f"\n[bold red]forbidden[/bold red] ({len(result.forbidden)}):")
    for choice in result.forbidden:
        console.print(f"  {choice.skill.id}: {'; '.join(choice.why)}")
    others = plural(result.not_triggered, "other skill")
    verb = "does" if result.not_triggered == 1 else "do"
    console.print(f"\n{others} {verb} not apply to this kernel")
    return 0
