"""What the CLI prints, read by a person or a log: words not internal names, whole titles or
titles cut at a word, counts in the right number, dates not Unix times, one speedup per
kernel with the times it comes from, and no wrapping at 80 columns when writing to a pipe.
Every command runs as a subprocess, its output captured through a pipe as in a CI log."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from agents.display import plural
from agents.sandbox.jail import find_jail
from memory.experiences import Experience, ExperienceStore, TaskSignature
from memory.store import MemoryStore
from tests.conftest import CANDIDATES, PROBLEMS, ROOT, requires_jail

KERNEL_AGENT = [sys.executable, "-m", "agents"]
LONG_TITLE = "Fold the bias, the scale and the shift " * 5 + "into one fused epilogue"


def cli(*args: str, columns: int | None = None, timeout: float = 300):
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [*KERNEL_AGENT, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env
    )


def _memory_with_one(path) -> None:
    with MemoryStore(path) as store:
        ExperienceStore(store).add(
            Experience(
                signature=TaskSignature(("gemm",), ((128, 512),), "float32", "torch"),
                slow_source="y = torch.matmul(a, b) * 2",
                fast_source="y = torch.matmul(a, b * 2)",
                speedup=1.5,
                title=LONG_TITLE,
                lesson="Scale the smaller operand.",
            )
        )


def test_memory_stats_shows_dates_and_counts_in_words(tmp_path):
    db = tmp_path / "m.sqlite3"
    _memory_with_one(db)
    done = cli("memory", "--db", str(db), "stats")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert re.fullmatch(r"1 experience, \d{4}-\d\d-\d\d \d\d:\d\d", first), done.stdout
    assert not re.search(r"\b\d{9,}\b", done.stdout), "a Unix timestamp reached the user"
    assert "by kind: positive 1" in done.stdout
    shown = cli("memory", "--db", str(db), "show", "1").stdout
    assert re.search(r"created_at: \d{4}-\d\d-\d\d \d\d:\d\d$", shown, re.M), shown
    exported = cli("memory", "--db", str(db), "export", str(tmp_path / "x.json")).stdout
    assert exported.startswith("exported 1 experience to ")
    # --json keeps the number for programs.
    stats = json.loads(cli("memory", "--db", str(db), "stats", "--json").stdout)
    assert isinstance(stats["oldest"], float)


def test_tables_in_a_pipe_keep_one_row_per_line_and_follow_columns(tmp_path):
    db = tmp_path / "m.sqlite3"
    _memory_with_one(db)
    piped = cli("memory", "--db", str(db), "list").stdout
    assert piped.splitlines()[0].strip() == "1 experience"
    (row,) = [line for line in piped.splitlines() if "1.50x" in line]
    assert LONG_TITLE in row, piped  # not wrapped at 80 columns
    narrow = cli("memory", "--db", str(db), "list", columns=60).stdout
    assert max(len(line) for line in narrow.splitlines()) <= 60, narrow
    assert LONG_TITLE not in narrow


@requires_jail
def test_profile_in_a_pipe_is_not_wrapped_at_80_columns():
    done = cli("profile", str(PROBLEMS / "linear_relu.py"), "--threads", "1", "--repeat", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith("(cpu, size default, 1 thread)"), lines[0]
    assert lines[1].startswith("forward ") and "attributed to source lines" in lines[1]
    (source,) = [line for line in lines if "return torch.relu(self.linear(x))" in line]
    assert re.search(r"FLOP, [0-9.]+ k?B\s*$", source), source  # the row is whole
    assert max(len(line.rstrip()) for line in lines) > 80


def _skill_titles() -> list[str]:
    done = cli("skills", "list", "--json")
    return [skill["title"] for skill in json.loads(done.stdout)]


def _title_is_whole_or_cut_at_a_word(title: str, titles: list[str]) -> bool:
    """Offline plan titles are "<skill title> (offline pass NAME)"; a shortened one must be
    such a title cut right before a space, with its parentheses closed."""
    if title.count("(") != title.count(")"):
        return False
    if not title.endswith("…"):
        return any(title.startswith(full) for full in titles)
    prefix = title[:-1]
    return any(
        full.startswith(prefix) and full[len(prefix) : len(prefix) + 1] == " "
        for full in (f"{t} (offline pass" for t in titles)
    )


@requires_jail
def test_optimize_reports_one_speedup_in_words_without_wrapping(tmp_path):
    """An offline search on a problem it speeds up (a sum moved ahead of a GEMM): the
    progress lines on stderr and the report on stdout, both through pipes."""
    trajectory = tmp_path / "trajectory.json"
    done = cli(
        "optimize",
        str(PROBLEMS / "wide_gemm_sum.py"),
        "--no-memory",
        "--iters",
        "1",
        "--max-evals",
        "3",
        "--threads",
        "1",
        "--timing-budget",
        "0.3",
        "--output",
        str(tmp_path / "out.py"),
        "--trajectory",
        str(trajectory),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "no_code" not in done.stderr + done.stdout
    assert "_error" not in done.stderr  # verdicts in words
    titles = _skill_titles()
    progress = [line.strip() for line in done.stderr.splitlines() if "→" in line]
    new_bests = re.findall(
        r"new best [0-9.]+x \((.*)\) after (\d+) (evaluations?)$", done.stderr, re.M
    )
    assert progress or new_bests, done.stderr
    for line in progress:
        title, _, rest = line.partition(" → ")
        assert _title_is_whole_or_cut_at_a_word(title, titles), line
        assert rest.split(":")[0] in {
            "nothing to rewrite",
            "compile error",
            "runtime error",
            "incorrect",
            "timed out",
            "rejected",
        }, line
    for title, count, word in new_bests:
        assert _title_is_whole_or_cut_at_a_word(title, titles), title
        assert (word == "evaluation") == (count == "1"), (count, word)
    counts = re.search(r"^(\d+) (evaluations?), (\d+) (iterations?), ", done.stdout, re.M)
    assert counts, done.stdout
    assert (counts.group(2) == "evaluation") == (counts.group(1) == "1"), counts.group(0)
    assert (counts.group(4) == "iteration") == (counts.group(3) == "1"), counts.group(0)
    # The profile summary is one line in a pipe, not wrapped at 80 columns.
    (profile,) = [line for line in done.stderr.splitlines() if line.startswith("profile ")]
    assert "aten op calls per forward" in profile

    report = json.loads(trajectory.read_text())
    assert report["improved"] and report["confirmed"], done.stdout
    verified = re.search(r"^verified ([0-9.]+)x faster", done.stdout, re.M)
    assert verified and verified.group(1) == f"{report['speedup']:.2f}", done.stdout
    basis = re.search(r"^  = reference ([0-9.]+) ms / candidate ([0-9.]+) ms", done.stdout, re.M)
    assert basis, done.stdout
    shown = float(basis.group(1)) / float(basis.group(2))
    assert shown == pytest.approx(report["speedup"], abs=0.005 + 0.002 * report["speedup"])
    evaluation = report["eval_report"]
    assert report["speedup"] == round(evaluation["reference_ms"] / evaluation["candidate_ms"], 4)
    searched = max(point["best_speedup"] for point in report["trajectory"])
    mentioned = f"the search's own best measurement was {searched:.2f}x" in done.stdout
    assert mentioned == (f"{searched:.2f}" != verified.group(1)), done.stdout


def test_counts_in_words_take_the_right_plural():
    """The server's outcome lines and the CLI count with `plural`: never "1 candidates"."""
    assert plural(1, "candidate") == "1 candidate"
    assert plural(0, "evaluation") == "0 evaluations"
    assert plural(2, "candidate") == "2 candidates"
    assert plural(3, "child", "children") == "3 children"


def test_eval_shows_a_short_isolation_line():
    """The isolation text is about 300 characters: on every eval a reader gets the few words
    that matter (the jail, the network, the filter, the memory cap). The whole text stays in
    --json (EvalResult.to_json's `isolation`, unchanged)."""
    jail = () if find_jail() is not None else ("--no-jail",)
    args = ("eval", str(PROBLEMS / "linear_relu.py"), str(CANDIDATES / "linear_relu_honest.py"))
    human = cli(*args, "--no-timing", "--threads", "1", *jail)
    assert human.returncode == 0, human.stderr
    (line,) = [line for line in human.stdout.splitlines() if line.startswith("  isolation: ")]
    assert len(line) < 100, line
    if jail:
        assert "NO jail (--no-jail), " in line and "no network" not in line, line
    else:
        assert "jail (bubblewrap), no network, " in line, line
    assert "seccomp" in line and "GiB address space" in line, line
