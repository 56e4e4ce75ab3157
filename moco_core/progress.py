"""Progress on long work: a one-line bar on a terminal, plain log lines otherwise; metrics as JSON lines."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from moco_core.checkpoint import CheckpointError, write_failure
from moco_core.loggers import Loggers
from moco_core.rundir import write_text_atomic
from moco_core.terminal import CLEAR_LINE, write_control


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


LINE = "line"
"""``enabled`` (and the ``show_progress`` of the long commands) set to this: on a terminal, the redrawn step line
alone, cleared when the work ends; no summaries, and nothing at all in a log. ``moco demo`` runs its steps so
unless given ``--progress``, so its output stays one line a step but a 10-minute step still shows it moves."""


class Progress:
    """Shows step counts, the given metrics, images/s and the ETA of the whole run.

    On a terminal the line is redrawn in place; elsewhere (a log file, CI) one line is printed every
    ``every`` steps, so logs stay readable. ``enabled``: True, False, or :data:`LINE`.
    """

    def __init__(self, total_steps: int, *, done_steps: int = 0, every: int = 10, stream: TextIO | None = None,
                 enabled: bool | str = True) -> None:
        self.total = total_steps
        self.start_done = done_steps
        self.every = every
        self.stream = stream or sys.stderr
        tty = self.stream.isatty()
        self.line_only = enabled == LINE
        self.enabled = bool(enabled) and (tty or not self.line_only)
        self.interactive = self.enabled and tty
        self.started = time.perf_counter()

    def update(self, done_steps: int, epoch: int, epochs: int, **metrics: float | None) -> None:
        """Show the line at ``done_steps``; a metric given as None has no value yet and shows as ``-``."""
        if not self.enabled or not (self.interactive or done_steps % self.every == 0 or done_steps == self.total):
            return
        if self.line_only and done_steps >= self.total:  # the work is done: leave the terminal's line clean
            write_control(self.stream, CLEAR_LINE)
            self.stream.flush()
            return
        elapsed = time.perf_counter() - self.started
        rate = (done_steps - self.start_done) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - done_steps) / rate if rate > 0 else math.inf
        fields = " ".join(f"{k} {'-' if v is None else format(v, '.4g')}" for k, v in metrics.items())
        line = f"epoch {epoch + 1}/{epochs} step {done_steps}/{self.total} {fields} eta {format_duration(eta)}"
        if self.interactive:
            write_control(self.stream, CLEAR_LINE)
            self.stream.write(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def message(self, text: str) -> None:
        """A line that stays (an epoch summary, a warning), printed above the bar (not with :data:`LINE`)."""
        if not self.enabled or self.line_only:
            return
        if self.interactive:
            write_control(self.stream, CLEAR_LINE)
        self.stream.write(text + "\n")
        self.stream.flush()


class MetricsWriter:
    """Appends one JSON object a line to ``metrics.jsonl`` and flushes each line, so a crash loses nothing.

    ``loggers`` (``run.loggers``) mirror each line's numbers (:mod:`moco_core.loggers`), from :meth:`start` on;
    ``config`` is the resolved config they record. Used as a context manager: leaving it closes them (their buffers
    flushed), on an error too.
    """

    def __init__(self, path: Path, *, enabled: bool = True, loggers: tuple[str, ...] = (),
                 config: dict[str, Any] | None = None) -> None:
        self.path = path
        self.enabled = enabled
        self.logger_names, self.config = loggers, config or {}
        self.loggers: Loggers | None = None

    def start(self, step: int) -> None:
        """The run goes on after ``step`` (0: a new run): drop the lines a killed run wrote after the checkpoint we
        resume from, and a line it tore; open the loggers, which continue after ``step`` too."""
        if not self.enabled:
            return
        if self.path.exists():
            self._truncate_after(step)
        if self.logger_names:
            self.loggers = Loggers(self.logger_names, self.path.parent, start=step, config=self.config)

    def _truncate_after(self, step: int) -> None:
        kept = []
        for line in self.path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # the half line of a process killed while writing it
                continue
            if isinstance(record, dict) and record.get("step", 0) <= step:
                kept.append(line)
        write_text_atomic(self.path, "".join(line + "\n" for line in kept))

    def write(self, **record: Any) -> None:
        if not self.enabled:
            return
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
