"""Hostile frames against the language server, and edit latency in a 5 MB document (issue 19).

    .venv/bin/python bench/lsp_fuzz.py [--frames 10000] [--edits 9] [--gap-ms 500] [--out F]

Spawns `python -m server` over stdio as raw bytes (no LSP library on the client side, so any
frame can be sent), initializes it, notes its RSS (VmRSS), then writes `--frames` hostile
frames: random bytes, huge, negative, non-numeric and missing Content-Length, invalid JSON,
batches, params of the wrong type, unknown methods, requests on documents never opened,
notifications with ids, failing kernelAgent.optimize commands, deeply nested JSON and
multi-megabyte strings (within the 64 MB cap). Then it checks that the server still answers
a codeLens request, and notes the RSS again. Last, it opens a ~5 MB Python file and times
one-line edits: didChange, then codeLens, until the code lenses arrive (median of --edits,
--gap-ms apart: the pause lets the previous edit's diagnostics go out first).

`tests/e2e/test_lsp_fuzz.py` runs the same frames (fewer) with asserts; this prints figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REQUEST_ID = re.compile(rb'"id": "(fuzz-\d+)"')
KNOWN_METHODS = (
    "textDocument/hover",
    "textDocument/codeLens",
    "textDocument/codeAction",
    "textDocument/didChange",
    "textDocument/didClose",
    "textDocument/didSave",
    "workspace/executeCommand",
    "workspace/didChangeConfiguration",
    "$/cancelRequest",
    "$/setTrace",
)
WRONG_PARAMS: tuple[Any, ...] = (
    3,
    "text",
    None,
    [1, 2, 3],
    {"textDocument": 3},
    {"textDocument": {"uri": 5}, "position": "here"},
    {"textDocument": {"uri": "file:///x.py"}, "position": {"line": -1, "character": 2**40}},
    {"command": 7, "arguments": {"a": 1}},
    {"contentChanges": "all", "textDocument": {"uri": "file:///x.py", "version": "v"}},
    {"id": [1], "settings": 1.5},
)


def frame(message: Any = None, raw: bytes | None = None) -> bytes:
    body = raw if raw is not None else json.dumps(message).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def hostile_frames(count: int, seed: int = 0) -> Iterator[bytes]:
    """`count` hostile frames, each self-contained: after any of them the next frame that
    starts with a valid header is read as it should be."""
    rng = random.Random(seed)
    for i in range(count):
        kind = i % 20
        msg_id = f"fuzz-{i}"
        if kind == 0:
            yield frame(raw=rng.randbytes(rng.randint(0, 300)))
        elif kind == 1:
            yield rng.randbytes(rng.randint(1, 200)).replace(b"Content-Length", b"C") + b"\r\n"
        elif kind == 2:
            huge = rng.choice([b"99999999999999999999", b"1000000000000000", b"67108865"])
            yield b"Content-Length: " + huge + b"\r\n\r\n{}"
        elif kind == 3:
            value = rng.choice([b"-5", b"abc", b"", b"0x10", b"1e3", b" 12 34", "\u0661".encode()])
            yield b"Content-Length: " + value + b"\r\n\r\n{}"
        elif kind == 4:
            yield b"Content-Type: application/vscode-jsonrpc\r\n\r\n{}"
        elif kind == 5:
            yield frame(raw=rng.choice([b"{", b'{"a":}', b"nul", b"\xff\xfe{}", b"", b"[1,"]))
        elif kind == 6:
            items = rng.choice([[], [1, 2], [{"jsonrpc": "2.0", "id": i, "method": "x"}], [{}]])
            yield frame(items)
        elif kind == 7:
            method = rng.choice(KNOWN_METHODS)
            params = rng.choice(WRONG_PARAMS)
            yield frame({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        elif kind == 8:
            yield frame({"jsonrpc": "2.0", "method": rng.choice(KNOWN_METHODS), "params": 3})
        elif kind == 9:
            method = f"custom/{rng.randint(0, 10**6)}"
            message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": {}}
            if rng.random() < 0.5:
                message["id"] = i
            yield frame(message)
        elif kind == 10:
            uri = f"file:///never-opened-{i}.py"
            doc = {"textDocument": {"uri": uri}}
            method, params = rng.choice(
                [
                    ("textDocument/codeLens", doc),
                    ("textDocument/hover", {**doc, "position": {"line": 0, "character": 0}}),
                    (
                        "textDocument/codeAction",
                        {
                            **doc,
                            "range": {
                                "start": {"line": 0, "character": 0},
                                "end": {"line": 0, "character": 0},
                            },
                            "context": {"diagnostics": []},
                        },
                    ),
                ]
            )
            yield frame({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        elif kind == 11:
            uri = f"file:///never-opened-{i}.py"
            yield frame(
                {
                    "jsonrpc": "2.0",
                    "id": msg_id,
                    "method": "textDocument/didClose",
                    "params": {"textDocument": {"uri": uri}},
                }
            )
        elif kind == 12:
            arguments = rng.choice(
                [[42], [], [{"uri": 1}], [{"uri": f"file:///nope-{i}.py", "target": "Model"}]]
            )
            yield frame(
                {
                    "jsonrpc": "2.0",
                    "id": msg_id,
                    "method": "workspace/executeCommand",
                    "params": {"command": "kernelAgent.optimize", "arguments": arguments},
                }
            )
        elif kind == 13:
            depth = rng.choice([50, 900, 5000, 200_000])
            yield frame(raw=_nested(depth).encode())
        elif kind == 14:
            params = json.loads(_nested(rng.choice([100, 400, 900])))
            yield frame({"jsonrpc": "2.0", "id": msg_id, "method": "custom/deep", "params": params})
        elif kind == 15:
            size = rng.choice([1, 2, 4]) * 1024 * 1024 if i % 100 == 15 else 64 * 1024
            yield frame(
                {"jsonrpc": "2.0", "id": msg_id, "method": "custom/big", "params": ["x" * size]}
            )
        elif kind == 16:
            yield frame({"jsonrpc": "2.0", "id": rng.choice([i, "nobody", None]), "result": {}})
        elif kind == 17:
            bad_id = rng.choice([1.5, True, {"a": 1}, [1]])
            yield frame({"jsonrpc": "2.0", "id": bad_id, "method": "textDocument/hover"})
        elif kind == 18:
            yield frame({"jsonrpc": rng.choice(["1.0", 2, None]), "id": i, "method": "x"})
        else:
            yield frame({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": [i]}})


class RawServer:
    """`python -m server` over pipes, spoken to in raw bytes; its replies are read in a
    thread (the server blocks if nobody reads its stdout)."""

    def __init__(self, extra_args: tuple[str, ...] = (), env: dict[str, str] | None = None):
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        environment = dict(env or os.environ)
        environment["PYTHONPATH"] = str(ROOT) + os.pathsep + environment.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server", *extra_args],
            cwd=ROOT,
            env=environment,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self.replies: dict[Any, dict] = {}
        self.diagnostics: dict[str, dict] = {}  # the latest publishDiagnostics by uri
        self.unmatched: list[Any] = []  # replies with id null, and batch replies
        self.received = 0
        self._lock = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        self._next = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    return
                if line in (b"\r\n", b"\n"):
                    break
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            message = json.loads(stream.read(length or 0))
            with self._lock:
                self.received += 1
                if isinstance(message, dict) and "method" not in message:
                    if message.get("id") is None:
                        self.unmatched.append(message)
                    else:
                        self.replies[message["id"]] = message
                elif isinstance(message, list):
                    self.unmatched.append(message)
                elif message.get("method") == "textDocument/publishDiagnostics":
                    self.diagnostics[message["params"]["uri"]] = message["params"]
                self._lock.notify_all()

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, method: str, params: Any = None, notify: bool = False) -> Any:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if notify:
            self.write(frame(message))
            return None
        self._next += 1
        message["id"] = msg_id = f"req-{self._next}"
        self.write(frame(message))
        return msg_id

    def reply(self, msg_id: Any, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        with self._lock:
            while msg_id not in self.replies:
                left = deadline - time.monotonic()
                if left <= 0 or not self.alive():
                    raise TimeoutError(f"no reply to {msg_id!r} (alive={self.alive()})")
                self._lock.wait(min(left, 0.5))
            return self.replies.pop(msg_id)

    def wait_for(self, predicate, timeout: float = 60.0) -> Any:
        """Wait until `predicate()` (called under the reply lock) is truthy; return it."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not (value := predicate()):
                left = deadline - time.monotonic()
                if left <= 0 or not self.alive():
                    raise TimeoutError(f"condition not met (alive={self.alive()})")
                self._lock.wait(min(left, 0.5))
            return value

    def request(self, method: str, params: Any = None, timeout: float = 60.0) -> dict:
        return self.reply(self.send(method, params), timeout)

    def initialize(self, root: Path) -> dict:
        reply = self.request(
            "initialize",
            {"processId": os.getpid(), "rootUri": root.as_uri(), "capabilities": {}},
        )
        self.send("initialized", {}, notify=True)
        return reply

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def stderr_tail(self, limit: int = 4000) -> str:
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - limit))
        return self._stderr.read().decode("utf-8", "replace")

    def close(self) -> None:
        if self.alive():
            try:
                self.request("shutdown", timeout=20)
                self.send("exit", notify=True)
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=20)
            except (OSError, TimeoutError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()


def open_document(server: RawServer, uri: str, text: str) -> None:
    item = {"uri": uri, "languageId": "python", "version": 1, "text": text}
    server.send("textDocument/didOpen", {"textDocument": item}, notify=True)


def code_lenses(server: RawServer, uri: str, timeout: float = 120.0) -> list[dict]:
    reply = server.request("textDocument/codeLens", {"textDocument": {"uri": uri}}, timeout)
    if "result" not in reply:
        raise RuntimeError(f"codeLens failed: {reply}")
    return reply["result"] or []


def fuzz(server: RawServer, frames: int, seed: int, probe_uri: str) -> dict[str, Any]:
    """Send the hostile frames, then a normal request; RSS before and after."""
    lenses_before = code_lenses(server, probe_uri)
    rss_before = server.rss_kb()
    requests: set[str] = set()
    start = time.perf_counter()
    for data in hostile_frames(frames, seed):
        match = REQUEST_ID.search(data[:300])
        if match:
            requests.add(match.group(1).decode())
        server.write(data)
    lenses_after = code_lenses(server, probe_uri, timeout=600)
    elapsed = time.perf_counter() - start
    time.sleep(1.0)  # the last async handlers' replies
    return {
        "frames": frames,
        "seconds": round(elapsed, 1),
        "alive": server.alive(),
        "answers_after": lenses_after == lenses_before,
        "requests_with_ids": len(requests),
        "requests_unanswered": len(requests - server.replies.keys()),
        "rss_before_mb": round(rss_before / 1024, 1),
        "rss_after_mb": round(server.rss_kb() / 1024, 1),
    }


def edit_latency(
    server: RawServer, uri: str, text: str, edits: int, gap_s: float = 0.5
) -> dict[str, Any]:
    """Median time from a one-line didChange to the code lenses that follow it. Edits are
    `gap_s` apart (a pause in typing: the diagnostics of the last one are out first)."""
    open_document(server, uri, text)
    start = time.perf_counter()
    lenses = code_lenses(server, uri)
    open_s = time.perf_counter() - start
    line = text.split("\n").index("# latency-benchmark: edited here")
    samples: list[float] = []
    for version in range(2, edits + 2):
        insert = version % 2 == 0
        change = {
            "range": {
                "start": {"line": line, "character": 0},
                "end": {"line": line, "character": 0 if insert else 1},
            },
            "text": "x" if insert else "",
        }
        params = {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]}
        time.sleep(gap_s)
        start = time.perf_counter()
        server.send("textDocument/didChange", params, notify=True)
        after = code_lenses(server, uri)
        samples.append(time.perf_counter() - start)
        assert len(after) == len(lenses), "an edit on a comment line changed the lenses"
    return {
        "document_mb": round(len(text.encode()) / 1e6, 2),
        "lines": text.count("\n") + 1,
        "open_to_lenses_s": round(open_s, 2),
        "edits": edits,
        "gap_s": gap_s,
        "edit_to_lenses_median_ms": round(statistics.median(samples) * 1000, 1),
        "edit_to_lenses_max_ms": round(max(samples) * 1000, 1),
    }


def big_document(megabytes: float = 5.0) -> str:
    sys.path.insert(0, str(ROOT / "bench"))
    from lsp_latency import generate_document

    return generate_document(int(megabytes * 1e6 / 26.5))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=10_000)
    parser.add_argument("--edits", type=int, default=9)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gap-ms", type=float, default=500.0, help="pause between edits")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        probe = root / "problem.py"
        probe.write_text((ROOT / "bench/problems/13_gemm_divide_sum_scaling.py").read_text())
        server = RawServer()
        try:
            server.initialize(root)
            open_document(server, probe.as_uri(), probe.read_text())
            result["fuzz"] = fuzz(server, args.frames, args.seed, probe.as_uri())
            big = root / "big.py"
            result["edit"] = edit_latency(
                server, big.as_uri(), big_document(), args.edits, args.gap_ms / 1000
            )
        finally:
            server.close()
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    fuzzed = result["fuzz"]
    healthy = fuzzed["alive"] and fuzzed["answers_after"] and not fuzzed["requests_unanswered"]
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
