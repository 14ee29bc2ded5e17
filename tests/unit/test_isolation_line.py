"""The human output's isolation line: the sandbox's whole text (about 300 characters) cut to
the words a reader checks, under 100 characters, never claiming a wall that did not stand."""

from __future__ import annotations

from agents.cli.evaluate import SHORT_ISOLATION, short_isolation

JAILED = (
    "bubblewrap jail [nobody]: unprivileged bubblewrap as uid 65534 (root dropped before it), "
    "RLIMIT_NPROC; all capabilities dropped, no network, own PID namespace, minimal read-only "
    "root, seccomp filter, 84 tasks (RLIMIT_NPROC), 2048 MiB scratch, 2048 MiB cache, 20,000 "
    "files each, 18 GiB address space, own cgroup (frozen, counted and killed as one), "
    "120 s build / 30 s run wall clock"
)
UNJAILED = (
    "no jail (--no-jail): own session, scrubbed environment, the host's files writable (TMPDIR "
    "is its scratch, removed after; what it writes elsewhere, /tmp and /dev/shm included, is "
    "not swept), kill filter (signals to itself and its group only), NO seccomp filter (no "
    "libseccomp), 84 tasks (watched), 2048 MiB scratch, 2048 MiB cache, 20,000 files each"
)


def test_a_jailed_run_reads_in_a_few_words():
    line = short_isolation(JAILED)
    assert line == (
        "jail (bubblewrap), no network, seccomp, 18 GiB address space, 120 s build / 30 s run"
    )
    assert len("  isolation: " + line) < 100


def test_no_jail_and_no_filter_are_said_and_nothing_is_claimed():
    line = short_isolation(UNJAILED)
    assert line == "NO jail (--no-jail), NO seccomp"


def test_a_text_it_does_not_know_is_kept_or_cut():
    assert short_isolation("static check only: the candidate was never run") == (
        "static check only: the candidate was never run"
    )
    cut = short_isolation("x" * 400)
    assert len(cut) == SHORT_ISOLATION and cut.endswith("…")
