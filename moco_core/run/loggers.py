"""Mirrors of metrics.jsonl for the tools researchers watch runs in: TensorBoard and Weights & Biases.

``run.loggers: [tensorboard, wandb]`` (each an optional extra). metrics.jsonl stays the record: every line goes
there first, then each numeric field of it (None and strings are skipped) goes to each logger as a scalar under
its own name, at x = the line's ``step`` (an optimizer step; a detection iteration). Only the main process logs.

A logger that fails (a full disk, a lost connection, a bug of its own) must not stop an hour of training: it is
dropped with one warning and the run goes on; metrics.jsonl still has every line.

A resumed run continues after the checkpoint's step, as metrics.jsonl does (the lines after it are dropped):

- TensorBoard: the new event file starts with a purge marker at that step + 1, so TensorBoard's readers drop what
  the killed run's files hold from there on; no step is shown twice.
- W&B: the run directory keeps the W&B run id (``wandb_run_id``) and the resumed run continues that W&B run
  (offline, in an ``offline-run-*`` directory of its own). W&B keeps one row a step and does not take back a step
  it has: resumed online, steps the killed run had logged after its checkpoint keep its values there, and the
  resumed run's values for them are dropped (W&B says so).
"""

from __future__ import annotations

import numbers
import os
import secrets
from pathlib import Path
from typing import Any, Protocol

from moco_core.errors import print_warning
from moco_core.run.rundir import write_text_atomic

WANDB_ID = "wandb_run_id"  # in the run directory: the W&B run a resume continues


class _Logger(Protocol):
    def log(self, step: int, values: dict[str, float]) -> None: ...

    def close(self, *, failed: bool) -> None: ...


def scalars(record: dict[str, Any]) -> tuple[int, dict[str, float]] | None:
    """(step, {name: value}) of a metrics line's numbers; None when it has no integer ``step`` or no number."""
    step = record.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    values = {name: float(value) for name, value in record.items()
              if name != "step" and isinstance(value, numbers.Real) and not isinstance(value, bool)}
    return (step, values) if values else None


class TensorBoard:
    """Event files under ``RUN_DIR/tensorboard/``, one a start, flushed after every line as metrics.jsonl is."""

    def __init__(self, run_dir: Path, *, start: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # TensorBoard's readers drop the events of earlier files from purge_step on: what metrics.jsonl dropped.
        self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=start + 1)

    def log(self, step: int, values: dict[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, global_step=step)
        self.writer.flush()

    def close(self, *, failed: bool) -> None:
        self.writer.close()


def wandb_mode() -> str | None:
    """W&B's mode: the user's ``WANDB_MODE`` when set (wandb reads it: None), else "offline". Logging online is
    asked for, never assumed: an offline run needs no account, never waits on the network and never prompts for a
    login; ``wandb sync RUN_DIR/wandb/offline-run-*`` uploads it later."""
    return None if os.environ.get("WANDB_MODE") else "offline"


class Wandb:
    """A W&B run in ``RUN_DIR/wandb/``, named after the run directory, with the resolved config. ``quiet``
    (``--quiet``): W&B prints nothing, in no colour (its banner, its run summary, its notes)."""

    def __init__(self, run_dir: Path, *, start: int, config: dict[str, Any], quiet: bool = False) -> None:
        import wandb

        id_file = run_dir / WANDB_ID
        resumed = start > 0 and id_file.is_file()
        run_id = id_file.read_text().strip() if resumed else secrets.token_hex(4)  # W&B's id alphabet: [a-z0-9]
        write_text_atomic(id_file, run_id + "\n")
        # W&B copies the console by default, which would record the progress line's redraws: off unless asked for.
        options: dict[str, Any] = {} if os.environ.get("WANDB_CONSOLE") else {"console": "off"}
        if quiet:
            options.update(silent=True, quiet=True, show_info=False, show_warnings=False, show_errors=False,
                           show_colors=False, show_emoji=False)
        settings = wandb.Settings(**options) if options else None
        self.run = wandb.init(dir=str(run_dir), id=run_id, name=run_dir.resolve().name, resume="allow",
                              project=os.environ.get("WANDB_PROJECT", "moco"), config=config, mode=wandb_mode(),
                              settings=settings)

    def log(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def close(self, *, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)


class Loggers:
    """The loggers of ``names``, opened for a run that continues after ``start``; each dropped with one warning
    the first time it fails."""

    def __init__(self, names: tuple[str, ...], run_dir: Path, *, start: int, config: dict[str, Any],
                 quiet: bool = False) -> None:
        self.open: dict[str, _Logger] = {}
        makers = {"tensorboard": lambda: TensorBoard(run_dir, start=start),
                  "wandb": lambda: Wandb(run_dir, start=start, config=config, quiet=quiet)}
        for name in names:
            try:
                self.open[name] = makers[name]()
            except Exception as err:  # whatever a logger raises: the run goes on without it
                self._drop(name, err, "could not start")

    def log(self, record: dict[str, Any]) -> None:
        found = scalars(record)
        if found is None:
            return
        for name, logger in list(self.open.items()):
            try:
                logger.log(*found)
            except Exception as err:  # as above
                self._drop(name, err, "stopped")

    def close(self, *, failed: bool = False) -> None:
        """Flush and close every logger (``failed``: the run ends on an error, which W&B records)."""
        for name, logger in list(self.open.items()):
            try:
                logger.close(failed=failed)
            except Exception as err:  # as above
                self._drop(name, err, "could not close")
        self.open.clear()

    def _drop(self, name: str, err: Exception, what: str) -> None:
        self.open.pop(name, None)
        print_warning(f"logger {name} {what} ({type(err).__name__}: {err}); the run goes on without it, "
                      f"metrics.jsonl has every line")
