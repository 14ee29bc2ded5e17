"""Thousands of hostile frames against `python -m server` over stdio (issue 19): it must
answer every request among them, stay alive, keep answering normal requests as before, and
not grow without bound. The frames are bench/lsp_fuzz.py's (which runs 10,000 of them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.lsp_fuzz import REQUEST_ID, RawServer, code_lenses, hostile_frames, open_document

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "bench/problems/13_gemm_divide_sum_scaling.py"
FRAMES = 2400
RSS_GROWTH_LIMIT_MB = 200  # generous: the frames hold multi-megabyte strings


@pytest.mark.parametrize("seed", [1, 2])
def test_hostile_frames_leave_the_server_serving(tmp_path, seed):
    server = RawServer()
    try:
        server.initialize(tmp_path)
        uri = (tmp_path / "problem.py").as_uri()
        open_document(server, uri, PROBLEM.read_text())
        lenses = code_lenses(server, uri)
        assert [lens["command"]["title"] for lens in lenses] == ["Optimize", "Profile"]
        rss_before = server.rss_kb()
        requests: set[str] = set()
        for data in hostile_frames(FRAMES, seed):
            match = REQUEST_ID.search(data[:300])
            if match:
                requests.add(match.group(1).decode())
            server.write(data)
        assert code_lenses(server, uri, timeout=300) == lenses
        assert server.alive()
        server.wait_for(lambda: requests <= server.replies.keys(), timeout=120)
        codes = {
            reply["error"]["code"]
            for reply in server.unmatched
            if isinstance(reply, dict) and "error" in reply
        }
        assert {-32700, -32600} <= codes
        assert any(isinstance(reply, list) for reply in server.unmatched)  # batches
        grown_mb = (server.rss_kb() - rss_before) / 1024
        assert grown_mb < RSS_GROWTH_LIMIT_MB, f"RSS grew {grown_mb:.0f} MB"
    finally:
        server.close()
