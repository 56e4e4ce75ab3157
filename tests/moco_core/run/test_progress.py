"""The progress line: on a terminal, in a log, and the demo's line-only mode (``LINE``)."""

from __future__ import annotations

import io

from moco_core.run.progress import LINE, Progress, SlowdownWatch

CLEAR = "\r\033[K"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(progress: Progress, total: int = 4) -> None:
    for step in range(1, total + 1):
        progress.update(step, 0, 1, loss=None if step < 2 else 1.5)
        if step == 2:
            progress.message("epoch 1/1: loss 1.5")


def test_a_log_gets_every_nth_line_the_last_and_the_summaries() -> None:
    log = io.StringIO()
    _run(Progress(4, every=3, stream=log))
    lines = log.getvalue().splitlines()
    assert [line.split(" eta ")[0] for line in lines] == [
        "epoch 1/1: loss 1.5", "epoch 1/1 step 3/4 loss 1.5", "epoch 1/1 step 4/4 loss 1.5"]
    assert CLEAR not in log.getvalue()


def test_a_metric_with_no_value_yet_shows_a_dash() -> None:
    log = io.StringIO()
    Progress(4, every=1, stream=log).update(1, 0, 2, loss=None, acc=None, lr=0.03)
    assert log.getvalue().startswith("epoch 1/2 step 1/4 loss - acc - lr 0.03 eta ")


def test_a_terminal_redraws_one_line_and_keeps_the_summaries() -> None:
    term = Terminal()
    _run(Progress(4, every=3, stream=term))
    out = term.getvalue()
    assert out.count(CLEAR + "epoch 1/1 step ") == 4 and "\n" not in out.replace("epoch 1/1: loss 1.5\n", "")
    assert CLEAR + "epoch 1/1: loss 1.5\n" in out
    assert out.rsplit(CLEAR, 1)[1].startswith("epoch 1/1 step 4/4 loss 1.5")  # the last line stays


def test_line_mode_on_a_terminal_shows_the_line_alone_and_clears_it_at_the_end() -> None:
    term = Terminal()
    _run(Progress(4, every=3, stream=term, enabled=LINE))
    out = term.getvalue()
    assert out.count(CLEAR + "epoch 1/1 step ") == 3  # steps 1-3 drawn; the last step clears instead
    assert "loss 1.5" in out and "\n" not in out  # no summary line
    drawn = out.split(CLEAR)
    assert drawn[-1] == "" and drawn[-2].startswith("epoch 1/1 step 3/4")  # cleared after the last line drawn


def test_line_mode_writes_nothing_to_a_log() -> None:
    log = io.StringIO()
    _run(Progress(4, every=1, stream=log, enabled=LINE))
    Progress(4, stream=log, enabled=False).message("hidden")
    assert log.getvalue() == ""


# --- SlowdownWatch: images/s that collapse on a shared CPU are named, once, with OMP_NUM_THREADS ---------------


def _feed(watch: SlowdownWatch, rates: list[float]) -> list[tuple[int, str]]:
    return [(i, msg) for i, rate in enumerate(rates) if (msg := watch.observe(rate)) is not None]


def test_slowdown_is_named_once_after_three_low_windows() -> None:
    # window 0 is the warm-up (not counted, whatever it was); windows 1-3 set the start: best 75;
    # then 20, 20, 24 are each below 75 / 3 = 25: the third in a row warns, naming the rate and the start
    said = _feed(SlowdownWatch(2), [400.0, 60.0, 75.0, 70.0, 20.0, 20.0, 24.0, 5.0, 5.0, 5.0, 5.0])
    assert len(said) == 1 and said[0][0] == 6
    assert said[0][1].startswith("warning: 24 images/s, down from 75 at the start")
    assert "2 threads a process" in said[0][1] and "OMP_NUM_THREADS=1" in said[0][1]


def test_a_recovery_starts_the_count_again_and_25_is_not_low() -> None:
    # 25 * 3 = 75 is not below 75; 30 recovers: the count restarts, so only the last three lows warn
    rates = [10.0, 75.0, 75.0, 75.0, 20.0, 25.0, 20.0, 20.0, 30.0, 20.0, 20.0, 20.0]
    said = _feed(SlowdownWatch(2), rates)
    assert [i for i, _ in said] == [11]


def test_one_thread_names_no_thread_setting_and_nan_is_ignored() -> None:
    said = _feed(SlowdownWatch(1), [50.0, 90.0, 90.0, 90.0, float("nan"), 10.0, 10.0, 10.0])
    assert [i for i, _ in said] == [7]
    assert "1 thread a process" in said[0][1] and "OMP_NUM_THREADS" not in said[0][1]


def test_a_steady_run_says_nothing() -> None:
    assert _feed(SlowdownWatch(2), [80.0 + (i % 7) for i in range(200)]) == []


# --- pace: a long phase shows it moves in a log too (issue 51, finding 5) ------------------------------------------


def test_line_mode_gives_a_log_a_pace_line_every_pace_seconds() -> None:
    """``moco demo`` without --progress, its output to a file: a line with the pace and the ETA at least every
    PACE_S seconds (here 0), nothing in between; it printed nothing, so a log could not tell a stuck step."""
    log = io.StringIO()
    _run(Progress(4, every=3, stream=log, enabled=LINE, pace_s=0.0))
    lines = log.getvalue().splitlines()
    assert len(lines) == 4 and all(" steps/s eta " in line for line in lines), lines
    assert lines[0].startswith("epoch 1/1 step 1/4 loss - ") and "epoch 1/1: loss 1.5" not in lines


def test_a_phase_is_named_and_a_slow_one_paces_a_log() -> None:
    log = io.StringIO()
    test = Progress(100, every=50, stream=log, label="test", pace_s=0.0)
    test.update(1, 0, 1, images=4)
    test.phase("test: scoring 8 predictions on 4 images (voc's evaluator)")
    assert log.getvalue().splitlines()[0].startswith("test step 1/100 images 4 eta ")  # not "epoch 1/1"
    assert log.getvalue().splitlines()[1] == "test: scoring 8 predictions on 4 images (voc's evaluator)"
    term = Terminal()
    Progress(4, stream=term, label="features").phase("scoring")
    assert term.getvalue() == CLEAR + "scoring"  # the terminal's current line, until the next one
