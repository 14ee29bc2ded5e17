"""Start-up time of the language server and of the CLI (issue 19).

    .venv/bin/python bench/startup.py [--runs 5] [--out startup.json]

For each run it spawns `python -m server` over stdio, writes an `initialize` request as raw
LSP bytes and times until the reply's bytes arrive (process start, imports and the handler
included), then `exit`s it; it also times `kernel-agent --help` (the venv's entry point, or
`python -m agents --help` where there is none) to its exit. It prints the median, min and
max of each in seconds, and writes them as JSON with --out. Cold and warm file caches are
not told apart: run it twice and read the second.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 1.0


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def read_reply(stream, want_id: int) -> dict:
    """Frames from the server until the response to `want_id` (skipping notifications)."""
    while True:
        length = None
        while True:
            line = stream.readline()
            if not line:
                raise RuntimeError("server closed stdout before answering")
            if line in (b"\r\n", b"\n"):
                break
            name, _, value = line.decode("ascii", "replace").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        message = json.loads(stream.read(length or 0))
        if message.get("id") == want_id and "method" not in message:
            return message


def time_initialize(env: dict[str, str]) -> float:
    """Seconds from spawning `python -m server` to its initialize reply."""
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"processId": os.getpid(), "rootUri": None, "capabilities": {}},
    }
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "server"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(frame(init))
    proc.stdin.flush()
    reply = read_reply(proc.stdout, 1)
    elapsed = time.perf_counter() - start
    if "result" not in reply:
        raise RuntimeError(f"initialize failed: {reply}")
    proc.stdin.write(frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
    proc.stdin.write(frame({"jsonrpc": "2.0", "method": "exit"}))
    proc.stdin.close()
    proc.wait(timeout=30)
    return elapsed


def help_command() -> list[str]:
    entry = Path(sys.executable).with_name("kernel-agent")
    if entry.exists():
        return [str(entry), "--help"]
    return [sys.executable, "-m", "agents", "--help"]


def time_help(env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(help_command(), cwd=ROOT, env=env, capture_output=True, check=True)
    return time.perf_counter() - start


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "median_s": round(statistics.median(samples), 3),
        "min_s": round(min(samples), 3),
        "max_s": round(max(samples), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    initialize = [time_initialize(env) for _ in range(args.runs)]
    help_times = [time_help(env) for _ in range(args.runs)]
    result = {
        "runs": args.runs,
        "initialize": summary(initialize),
        "help": summary(help_times),
        "help_command": " ".join([Path(help_command()[0]).name, *help_command()[1:]]),
        "target_s": TARGET_S,
    }
    print("| what | median s | min s | max s |")
    print("| --- | --- | --- | --- |")
    for name in ("initialize", "help"):
        row = result[name]
        print(f"| {name} | {row['median_s']} | {row['min_s']} | {row['max_s']} |")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
