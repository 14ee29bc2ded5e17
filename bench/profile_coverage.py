"""How much of each problem's measured op time `profile` attributes to exact source lines.

Issue 3 asks for at least 95% on the suite. Usage:
    python bench/profile_coverage.py [bench/problems] [--device cpu|cuda] [--size default|gpu]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agents.bench.suite import discover
from agents.profile.api import profile_file
from agents.task import SourceFile


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default="bench/problems")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", default="default")
    args = parser.parse_args(argv)
    shares = []
    print(f"{'problem':40} {'forward ms':>10} {'attributed':>10} {'hottest line':>12}")
    for path in discover(Path(args.path)):
        profile = profile_file(SourceFile.from_path(path), device=args.device, size=args.size)
        hottest = profile.lines[0] if profile.lines else None
        where = f"{hottest.line} ({hottest.share:.0%})" if hottest else "-"
        print(
            f"{path.stem:40} {profile.total_ms:10.3f} {profile.attributed_share:10.1%} {where:>12}"
        )
        shares.append(profile.attributed_share)
    print(f"minimum attributed share {min(shares):.1%} over {len(shares)} problems")
    return 0 if min(shares) >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
