"""`kernel-agent memory list|show ID|export FILE|import FILE|forget ID|stats`: the optimization
memory (slow → fast experiences with lessons) that the agents learn from, shared as JSON."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from agents.display import make_console, plural

JSON_HELP = "print JSON instead of text"
DATE_FORMAT = "%Y-%m-%d %H:%M"
DATE_FIELDS = ("created_at", "oldest", "newest")


class MemoryCommandError(Exception):
    """A usage error of the memory command: one line, exit status 2."""


def format_date(value: Any) -> str:
    """A stored Unix time as a local date ("2026-12-04 17:03"): what a person reads; the
    JSON output keeps the number for programs."""
    if not isinstance(value, int | float):
        return "-" if value is None else str(value)
    return time.strftime(DATE_FORMAT, time.localtime(value))


def add_memory_parser(commands) -> None:
    memory = commands.add_parser(
        "memory",
        help="the optimization memory: list, show, export, import, forget, stats",
        description="Experiences (a slow kernel, a faster one, the speedup and a lesson) "
        "persist in one SQLite file: $KERNEL_AGENT_MEMORY, or the user data directory.",
    )
    memory.add_argument("--db", type=Path, default=None, help="the memory file to use")
    actions = memory.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="experiences, newest first")
    listing.add_argument("--limit", type=int, default=50, help="show at most N (default 50)")
    listing.add_argument("--offset", type=int, default=0, help="skip the newest N first")
    listing.add_argument("--json", action="store_true", help=JSON_HELP)
    show = actions.add_parser("show", help="one experience in full")
    show.add_argument("id", type=int, help="the experience's id, from `memory list`")
    show.add_argument("--json", action="store_true", help=JSON_HELP)
    export = actions.add_parser("export", help="write every experience to a JSON file")
    export.add_argument("file", type=Path, help="the JSON file to write")
    imported = actions.add_parser("import", help="add experiences from a JSON file")
    imported.add_argument("file", type=Path, help="a file written by `memory export`")
    imported.add_argument("--json", action="store_true", help=JSON_HELP)
    forget = actions.add_parser("forget", help="delete one experience")
    forget.add_argument("id", type=int, help="the experience's id, from `memory list`")
    stats = actions.add_parser("stats", help="counts by kind, target and feedback")
    stats.add_argument("--json", action="store_true", help=JSON_HELP)


def run_memory(args: argparse.Namespace) -> int:
    from memory.experiences import ExperienceStore, MemoryFileError
    from memory.store import MemoryStore, MemoryStoreError, default_path

    path = args.db or default_path()
    try:
        store = MemoryStore(path)
    except MemoryStoreError as error:
        raise MemoryCommandError(str(error)) from None
    if store.recovered_from:
        print(f"kernel-agent: {store.recovered_from}", file=sys.stderr)
    try:
        experiences = ExperienceStore(store)
        return _dispatch(args, experiences)
    except MemoryFileError as error:
        raise MemoryCommandError(str(error)) from None
    finally:
        store.close()


def _dispatch(args: argparse.Namespace, experiences: Any) -> int:
    from rich.table import Table

    console = make_console()
    if args.action == "list":
        rows = experiences.list(limit=args.limit, offset=args.offset)
        if args.json:
            print(json.dumps([row.to_json() for row in rows], indent=2))
            return 0
        table = Table(title=plural(experiences.count(), "experience"), title_justify="left")
        for column in ("id", "kind", "speedup", "target", "title", "feedback"):
            table.add_column(column)
        for row in rows:
            table.add_row(
                str(row.id),
                row.kind,
                f"{row.speedup:.2f}x",
                row.signature.target,
                row.title,
                row.feedback,
            )
        console.print(table)
        return 0
    if args.action == "show":
        found = experiences.get(args.id)
        if found is None:
            raise MemoryCommandError(f"no experience {args.id}: see `kernel-agent memory list`")
        if args.json:
            print(json.dumps(found.to_json(), indent=2))
        else:
            for key, value in found.to_json().items():
                shown = format_date(value) if key in DATE_FIELDS else value
                console.print(f"[bold]{key}[/bold]: {shown}", highlight=False)
        return 0
    if args.action == "export":
        experiences.export_json(args.file)
        print(f"exported {plural(experiences.count(), 'experience')} to {args.file}")
        return 0
    if args.action == "import":
        added = experiences.import_json(args.file)
        if args.json:
            print(json.dumps({"imported": added}))
        else:
            print(f"imported {plural(added, 'new experience')} from {args.file}")
        return 0
    if args.action == "forget":
        if not experiences.forget(args.id):
            raise MemoryCommandError(f"no experience {args.id}: see `kernel-agent memory list`")
        print(f"forgot experience {args.id}")
        return 0
    stats = experiences.stats()
    if args.json:
        print(json.dumps(stats, indent=2, default=str))
    else:
        for line in stats_lines(stats):
            console.print(line, markup=False, highlight=False)
    return 0


def stats_lines(stats: dict[str, Any]) -> list[str]:
    """`memory stats` in words: the count, the span of dates, then each breakdown."""
    total = stats.get("total", 0)
    lines = [plural(total, "experience")]
    if total:
        oldest, newest = format_date(stats.get("oldest")), format_date(stats.get("newest"))
        lines[0] += f", {oldest}" if oldest == newest else f", from {oldest} to {newest}"
    for key, value in stats.items() if total else ():
        if key.startswith("by_") and isinstance(value, dict):
            counts = ", ".join(f"{name} {count}" for name, count in value.items())
            lines.append(f"by {key[3:]}: {counts or 'none'}")
    return lines
