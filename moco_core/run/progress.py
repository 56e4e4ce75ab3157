"""Progress on long work: a one-line bar on a terminal, plain log lines otherwise; metrics as JSON lines."""

from __future__ import annotations

import datetime
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from moco_core.checkpoint import CheckpointError, write_failure
from moco_core.errors import UserError
from moco_core.run.loggers import Loggers
from moco_core.run.rundir import write_text_atomic
from moco_core.terminal import CLEAR_LINE, write_control
from moco_core.user_files import LIST_LIMIT, parse_json, read_bytes


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


LINE = "line"
"""``enabled`` (and the ``show_progress`` of the long commands) set to this: on a terminal, the redrawn step line
alone, cleared when the work ends; no summaries; in a log, a pace line every :data:`PACE_S` seconds only.
``moco demo`` runs its steps so unless given ``--progress``, so its output stays one line a step but a 10-minute
step still shows it moves, on a terminal and in a log."""

PACE_S = 60.0  # in a log, a long phase prints its pace (steps, rate, ETA) at least this often


class Progress:
    """Shows step counts, the given metrics, images/s and the ETA of the whole run (or phase: ``label`` names it,
    "test", "features", instead of the epoch).

    On a terminal the line is redrawn in place; elsewhere (a log file, CI) one line is printed every
    ``every`` steps, and at least every :data:`PACE_S` seconds however slow the steps, so logs stay readable and a
    log of a long phase still gives its pace. ``enabled``: True, False, or :data:`LINE`.
    """

    def __init__(self, total_steps: int, *, done_steps: int = 0, every: int = 10, stream: TextIO | None = None,
                 enabled: bool | str = True, label: str | None = None, pace_s: float = PACE_S) -> None:
        self.total = total_steps
        self.start_done = done_steps
        self.every = every
        self.stream = stream or sys.stderr
        tty = self.stream.isatty()
        self.line_only = enabled == LINE
        self.enabled = bool(enabled)
        self.interactive = self.enabled and tty
        self.label, self.pace_s = label, pace_s
        self.started = self.shown = time.perf_counter()

    def update(self, done_steps: int, epoch: int, epochs: int, **metrics: float | None) -> None:
        """Show the line at ``done_steps``; a metric given as None has no value yet and shows as ``-``."""
        if not self.enabled:
            return
        now = time.perf_counter()
        paced = now - self.shown >= self.pace_s
        if not self.interactive and not (paced or not self.line_only and (done_steps % self.every == 0
                                                                          or done_steps == self.total)):
            return
        if self.interactive and self.line_only and done_steps >= self.total:  # done: leave the line clean
            write_control(self.stream, CLEAR_LINE)
            self.stream.flush()
            return
        self.shown = now
        elapsed = now - self.started
        rate = (done_steps - self.start_done) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - done_steps) / rate if rate > 0 else math.inf
        fields = " ".join(f"{k} {'-' if v is None else format(v, '.4g')}" for k, v in metrics.items())
        where = self.label or f"epoch {epoch + 1}/{epochs}"
        pace = f" {rate:.3g} steps/s" if self.line_only and not self.interactive else ""
        line = f"{where} step {done_steps}/{self.total} {fields}{pace} eta {format_duration(eta)}".replace("  ", " ")
        if self.interactive:
            write_control(self.stream, CLEAR_LINE)
            self.stream.write(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def phase(self, text: str) -> None:
        """The start of a phase that reports no steps (an evaluator scoring the test set): the current line on a
        terminal, a line in a log."""
        if not self.enabled:
            return
        if self.interactive:
            write_control(self.stream, CLEAR_LINE)
            self.stream.write(text)
        else:
            self.stream.write(text + "\n")
        self.shown = time.perf_counter()
        self.stream.flush()

    def clear(self) -> None:
        """A terminal's line cleared (a phase's, or the last step's), before lines of other writers."""
        if self.interactive:
            write_control(self.stream, CLEAR_LINE)
            self.stream.flush()

    def message(self, text: str) -> None:
        """A line that stays (an epoch summary, a warning), printed above the bar (not with :data:`LINE`)."""
        if not self.enabled or self.line_only:
            return
        if self.interactive:
            write_control(self.stream, CLEAR_LINE)
        self.stream.write(text + "\n")
        self.stream.flush()


class SlowdownWatch:
    """On CPU, says once when a run's images/s fall far below what it did at its start, and names the likely cure.

    A CPU shared with other work slows PyTorch's thread pool far more than the share it lost: on a 2-core machine
    with another job, the default 2 threads fell to 7-8 images/s where OMP_NUM_THREADS=1 kept 47-75
    (benchmarks/cpu_threads.py measures it). The first window is the warm-up and is not counted; the best of the
    next ``baseline`` windows is what the machine did at the start; ``patience`` windows in a row below a
    ``factor``-th of it give one message (None otherwise).
    """

    def __init__(self, threads: int, *, factor: float = 3.0, baseline: int = 3, patience: int = 3) -> None:
        self.threads, self.factor, self.baseline_windows, self.patience = threads, factor, baseline, patience
        self.seen = 0
        self.best = 0.0
        self.low = 0
        self.said = False

    def observe(self, rate: float) -> str | None:
        """One window's images/s; the warning, the first time the slowdown lasts."""
        self.seen += 1
        if self.seen == 1 or self.said or not math.isfinite(rate):
            return None
        if self.seen <= 1 + self.baseline_windows:
            self.best = max(self.best, rate)
            return None
        self.low = self.low + 1 if rate * self.factor < self.best else 0
        if self.low < self.patience:
            return None
        self.said = True
        advice = ("OMP_NUM_THREADS=1 before the command often runs several times faster on a shared CPU"
                  if self.threads > 1 else "fewer processes, or a quieter machine, would help")
        return (f"warning: {rate:.0f} images/s, down from {self.best:.0f} at the start of this run: the CPU is "
                f"likely busy with other work; this run uses {self.threads} thread{'s' * (self.threads > 1)} a "
                f"process, and {advice}")


class MetricsWriter:
    """Appends one JSON object a line to ``metrics.jsonl`` and flushes each line, so a crash loses nothing. Each
    line carries ``time``, when it was written (ISO 8601, local time with its UTC offset, milliseconds): a log's
    pace and a run's ETA can be read back from the file alone.

    ``loggers`` (``run.loggers``) mirror each line's numbers (:mod:`moco_core.run.loggers`), from :meth:`start` on;
    ``config`` is the resolved config they record; ``quiet`` (``--quiet``): they print nothing either. Used as a
    context manager: leaving it closes them (their buffers flushed), on an error too.
    """

    def __init__(self, path: Path, *, enabled: bool = True, loggers: tuple[str, ...] = (),
                 config: dict[str, Any] | None = None, quiet: bool = False) -> None:
        self.path = path
        self.enabled = enabled
        self.logger_names, self.config, self.quiet = loggers, config or {}, quiet
        self.loggers: Loggers | None = None

    def start(self, step: int) -> None:
        """The run goes on after ``step`` (0: a new run): drop the lines a killed run wrote after the checkpoint we
        resume from, and a line it tore; open the loggers, which continue after ``step`` too."""
        if not self.enabled:
            return
        if self.path.exists():
            self._truncate_after(step)
        if self.logger_names:
            self.loggers = Loggers(self.logger_names, self.path.parent, start=step, config=self.config,
                                   quiet=self.quiet)

    def _truncate_after(self, step: int) -> None:
        """Keep the lines of steps up to ``step``; a line that is not a JSON object of ours (the half line of a
        process killed while writing it, a number beyond 64 bits) is dropped. The file is read through
        :mod:`moco_core.user_files`: a run directory's metrics.jsonl that is a FIFO or huge is one line."""
        kept = []
        text = read_bytes(self.path, limit=LIST_LIMIT, what="metrics file")
        for line in text.decode("utf-8", errors="replace").splitlines():
            try:
                record = parse_json(line, what="")
            except UserError:
                continue
            done = record.get("step", 0) if isinstance(record, dict) else None
            if isinstance(done, int | float) and not isinstance(done, bool) and done <= step:
                kept.append(line)
        write_text_atomic(self.path, "".join(line + "\n" for line in kept))

    def write(self, **record: Any) -> None:
        if not self.enabled:
            return
        record["time"] = datetime.datetime.now().astimezone().isoformat(timespec="milliseconds")
        try:
            with self.path.open("a") as f:
                f.write(json.dumps(record, sort_keys=False) + "\n")
        except OSError as err:
            raise CheckpointError(f"cannot append to {self.path}: {write_failure(err, self.path.parent)}") from None
        if self.loggers is not None:
            self.loggers.log(record)

    def close(self, *, failed: bool = False) -> None:
        if self.loggers is not None:
            self.loggers.close(failed=failed)
            self.loggers = None

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self.close(failed=kind is not None)
