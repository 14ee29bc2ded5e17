"""`kernel-agent skills` and `kernel-agent memory` through the real command line."""

from __future__ import annotations

import json
import subprocess
import sys

from memory.experiences import Experience, ExperienceStore, TaskSignature
from memory.store import MemoryStore
from tests.conftest import ROOT

KERNEL_AGENT = [sys.executable, "-m", "agents"]


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*KERNEL_AGENT, *args], capture_output=True, text=True, timeout=180, cwd=ROOT, env=env
    )


def test_skills_list_and_show():
    listed = json.loads(cli("skills", "list", "--json").stdout)
    assert len(listed) >= 40
    cuda_only = json.loads(cli("skills", "list", "--target", "triton", "--json").stdout)
    assert cuda_only and all("triton" in skill["targets"] for skill in cuda_only)
    first = listed[0]["id"]
    shown = json.loads(cli("skills", "show", first, "--json").stdout)
    assert shown["id"] == first and shown["strategy"]


def test_skills_show_unknown_id_is_a_usage_error():
    done = cli("skills", "show", "no-such-skill")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no-such-skill" in done.stderr


def test_skills_match_prints_the_gate_reasoning():
    problem = ROOT / "bench" / "problems" / "13_gemm_divide_sum_scaling.py"
    done = cli("skills", "match", str(problem), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert any(fact.startswith("hot op categories: gemm") for fact in result["facts"])
    assert result["allowed"] and all(entry["why"] for entry in result["allowed"])
    text = cli("skills", "match", str(problem), "--no-profile").stdout
    assert "allowed" in text and "reduction_after_gemm" in text


def _store_with(path, count: int) -> None:
    with MemoryStore(path) as store:
        experiences = ExperienceStore(store)
        for index in range(count):
            experiences.add(
                Experience(
                    signature=TaskSignature(
                        ("gemm", "reduction"), ((128, 512),), "float32", "torch"
                    ),
                    slow_source=f"x = torch.matmul(a, b).sum({index})",
                    fast_source=f"x = a @ b.sum(0)  # {index}\ny = {index}",
                    speedup=2.0 + index,
                    title=f"sum before gemm {index}",
                    lesson="A sum over the GEMM output commutes with the GEMM.",
                )
            )


def test_memory_commands_round_trip_through_json(tmp_path):
    db, exported, other = tmp_path / "a.sqlite3", tmp_path / "shared.json", tmp_path / "b.sqlite3"
    _store_with(db, 3)
    listed = json.loads(cli("memory", "--db", str(db), "list", "--json").stdout)
    assert len(listed) == 3
    one = listed[0]["id"]
    shown = json.loads(cli("memory", "--db", str(db), "show", str(one), "--json").stdout)
    assert shown["lesson"].startswith("A sum over")
    assert cli("memory", "--db", str(db), "export", str(exported)).returncode == 0
    imported = json.loads(
        cli("memory", "--db", str(other), "import", str(exported), "--json").stdout
    )
    assert imported == {"imported": 3}
    again = json.loads(cli("memory", "--db", str(other), "import", str(exported), "--json").stdout)
    assert again == {"imported": 0}
    assert cli("memory", "--db", str(other), "forget", str(one)).returncode == 0
    stats = json.loads(cli("memory", "--db", str(other), "stats", "--json").stdout)
    assert stats["total"] == 2 and stats["by_kind"] == {"positive": 2}
    assert len(json.loads(cli("memory", "--db", str(other), "list", "--json").stdout)) == 2


def test_memory_import_of_a_bad_file_is_a_usage_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    done = cli("memory", "--db", str(tmp_path / "m.sqlite3"), "import", str(bad))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "bad.json" in done.stderr


def test_memory_on_a_corrupt_file_says_so_and_keeps_working(tmp_path):
    db = tmp_path / "m.sqlite3"
    db.write_bytes(b"this is not a database" * 100)
    done = cli("memory", "--db", str(db), "list", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    assert "corrupt" in done.stderr.lower() or "moved" in done.stderr.lower()
    assert list(tmp_path.glob("m.sqlite3.corrupt-*"))
