"""CPUs other work leaves free (agents/sandbox/cpus.py): each allowed CPU's idle share
between two /proc/stat readings, summed and rounded, never below 1."""

from __future__ import annotations

from agents.sandbox.cpus import free_from, parse_stat

STAT = """cpu  300 0 100 600 0 0 0 0 0 0
cpu0 {busy0} 0 0 {idle0} 0 0 0 0 0 0
cpu1 {busy1} 0 0 {idle1} 0 0 0 0 0 0
intr 1 2 3
"""


def reading(busy0: int, idle0: int, busy1: int, idle1: int):
    return parse_stat(STAT.format(busy0=busy0, idle0=idle0, busy1=busy1, idle1=idle1))


def test_parse_reads_each_cpu_s_idle_and_all_ticks():
    assert reading(10, 90, 40, 60) == {0: (90, 100), 1: (60, 100)}


def test_two_busy_loops_on_two_cpus_leave_one_thread():
    before, after = reading(0, 0, 0, 0), reading(30, 0, 29, 1)
    assert free_from(before, after, [0, 1]) == 1


def test_an_idle_machine_keeps_every_cpu():
    before, after = reading(0, 0, 0, 0), reading(2, 28, 5, 25)
    assert free_from(before, after, [0, 1]) == 2


def test_one_busy_cpu_of_two_leaves_one():
    before, after = reading(0, 0, 0, 0), reading(30, 0, 3, 27)
    assert free_from(before, after, [0, 1]) == 1


def test_only_the_allowed_cpus_count():
    before, after = reading(0, 0, 0, 0), reading(0, 30, 30, 0)
    assert free_from(before, after, [1]) == 1  # cpu1 is busy, but one thread always remains
    assert free_from(before, after, [0]) == 1
