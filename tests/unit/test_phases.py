"""The phase clock: the seconds each phase took, and a callback told of each phase as it
begins, which can never break an evaluation."""

from __future__ import annotations

from agents.verify.phases import Phase, PhaseClock


def test_phases_in_words_and_seconds_by_name():
    heard: list[str] = []
    clock = PhaseClock(lambda: 0.0, lambda phase: heard.append(phase.text))
    clock.switch("build")
    clock.switch("run", 1, 5)
    clock.switch("anchor", 1, 5)
    clock.switch("run", 1, 5)
    clock.switch("run", 1, 5)  # the same phase again: nothing new to show
    clock.switch("run", 2, 2, reload=True)
    seconds = clock.stop()
    assert heard == [
        "starting workers",
        "building the candidate",
        "correctness 1/5",
        "correctness 1/5: float64 anchor",
        "correctness 1/5",
        "reload check 2/2",
    ]
    assert set(seconds) == {"start", "build", "run", "anchor"}
    assert all(value >= 0 for value in seconds.values())
    assert Phase("measure").text == "timing"


def test_a_callback_that_raises_is_ignored():
    def broken(phase: Phase) -> None:
        raise RuntimeError("a broken progress view")

    clock = PhaseClock(lambda: 2.5, broken)
    clock.switch("build")
    assert "build" in clock.stop()


def test_paused_seconds_count_apart():
    paused = iter([1.0, 4.0])
    clock = PhaseClock(lambda: next(paused))
    assert clock.stop()["paused"] == 3.0
