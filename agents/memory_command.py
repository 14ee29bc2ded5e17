"""`kernel-agent memory list|show ID|export FILE|import FILE|forget ID|stats`: the optimization
memory (slow → fast experiences with lessons) that the agents learn from, shared as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table


class MemoryCommandError(Exception):
    """A usage error of the memory command: one line, exit status 2."""


def add_memory_parser(commands) -> None:
    memory = commands.add_parser(
        "memory",
        help="the optimization memory: list, show, export, import, forget, stats",
        description="Experiences (a slow kernel, a faster one, the speedup and a lesson) "
        "persist in one SQLite file: $KERNEL_AGENT_MEMORY, or the user data directory.",
    )
    memory.add_argument("--db", type=Path, default=None, help="the memory file to use")
    actions = memory.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="experiences, newest first")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--offset", type=int, default=0)
    listing.add_argument("--json", action="store_true")
    show = actions.add_parser("show", help="one experience in full")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true")
    export = actions.add_parser("export", help="write every experience to a JSON file")
    export.add_argument("file", type=Path)
    imported = actions.add_parser("import", help="add experiences from a JSON file")
    imported.add_argument("file", type=Path)
    imported.add_argument("--json", action="store_true")
    forget = actions.add_parser("forget", help="delete one experience")
    forget.add_argument("id", type=int)
    stats = actions.add_parser("stats", help="counts by kind, target and feedback")
    stats.add_argument("--json", action="store_true")


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
        return _dispatch(args, experiences, Console())
    except MemoryFileError as error:
        raise MemoryCommandError(str(error)) from None
    finally:
        store.close()


def _dispatch(args: argparse.Namespace, experiences, console: Console) -> int:
    if args.action == "list":
        rows = experiences.list(limit=args.limit, offset=args.offset)
        if args.json:
            print(json.dumps([row.to_json() for row in rows], indent=2))
            return 0
        table = Table(title=f"{experiences.count()} experiences")
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
                console.print(f"[bold]{key}[/bold]: {value}")
        return 0
    if args.action == "export":
        experiences.export_json(args.file)
        print(f"exported {experiences.count()} experiences to {args.file}")
        return 0
    if args.action == "import":
        added = experiences.import_json(args.file)
        if args.json:
            print(json.dumps({"imported": added}))
        else:
            print(f"imported {added} new experiences from {args.file}")
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
        for key, value in stats.items():
            console.print(f"{key}: {value}")
    return 0
