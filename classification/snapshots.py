"""``moco eval snapshots``: the linear protocol on every snapshot a pretraining keeps (``run.keep_every``).

Each snapshot ``checkpoint_NNNN.pth.tar`` of the run directory gets its own evaluation directory,
``OUT/checkpoint_NNNN``; its record carries ``snapshot: {run, epoch}``, and ``moco report`` plots those top-1
values against the pretraining's epochs beside its loss and kNN curves. A finished evaluation is skipped and an
interrupted one resumed, so the command can be run again at any time. With ``follow`` it also waits for the
snapshots the run is still to write (from its config.yaml: every ``keep_every`` epochs up to ``optim.epochs``),
evaluating each as it appears: beside the pretraining, on the same machine or as a job of its own.

Following ends when every announced snapshot is evaluated, or (:class:`FollowEnded`) when they will not come: the
pretraining has finished, or no live process has held its run directory's lock (``.moco.lock``, see
:mod:`moco_core.run.rundir`) for a grace period (a requeued run waits in the queue meanwhile), or, with a timeout, no
new snapshot came for that long.
"""

from __future__ import annotations

import fcntl
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from moco_core import checkpoint
from moco_core.checkpoint import snapshot_name
from moco_core.config import ConfigError
from moco_core.errors import UserError
from moco_core.run.rundir import LOCK, last_checkpoint
from moco_core.user_files import CONFIG_LIMIT, read_text

SNAPSHOT = re.compile(r"checkpoint_(\d{4,})\.pth\.tar")


class FollowEnded(UserError):
    """``--follow`` stopped before every announced snapshot was evaluated; the message says why (exit code 1)."""

    exit_code = 1


def schedule(run_dir: Path) -> tuple[int, int]:
    """(run.keep_every, optim.epochs) of the run's config.yaml."""
    try:
        cfg = yaml.safe_load(read_text(run_dir / "config.yaml", limit=CONFIG_LIMIT, what="config.yaml"))
        return int(cfg["run"]["keep_every"]), int(cfg["optim"]["epochs"])
    except (UserError, yaml.YAMLError, KeyError, TypeError, ValueError):
        raise ConfigError(f"{run_dir}: not a pretraining run directory (no readable config.yaml)") from None


def expected_snapshots(run_dir: Path) -> list[str]:
    """The snapshots the run's config.yaml says it will keep (empty when it keeps none)."""
    every, epochs = schedule(run_dir)
    return [snapshot_name(e) for e in range(epochs) if every and (e + 1) % every == 0]


def present_snapshots(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.iterdir() if SNAPSHOT.fullmatch(p.name))


def pretraining_running(run_dir: Path) -> bool | None:
    """Whether a live process holds ``run_dir``'s lock; None where the filesystem has no locks (no telling).

    Probed with a shared lock taken and dropped at once (a dead holder's lock is free). A pretraining starting in
    those microseconds would find the directory busy: looking once a minute, about one start in ten million.
    """
    try:
        fd = os.open(run_dir / LOCK, os.O_RDONLY)
    except FileNotFoundError:
        return False  # removed at the run's end (or by none yet)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # and with it our shared lock
    return False


class _Waiting:
    """The clocks of ``--follow``: since when no new snapshot came, since when no live process holds the lock."""

    def __init__(self, run_dir: Path, grace_s: float, timeout_s: float | None) -> None:
        self.run_dir, self.grace_s, self.timeout_s = run_dir, grace_s, timeout_s
        self.since, self.free_since = time.monotonic(), None
        self._checked: tuple[int, int] | None = None  # the last checkpoint seen by finished(): (mtime, size)
        self._finished = False

    def restart(self) -> None:
        """New snapshots came and were evaluated: the waiting starts again."""
        self.since, self.free_since = time.monotonic(), None

    def why_not(self) -> str | None:
        """Why the snapshots still to come will not be waited for any longer, or None."""
        now = time.monotonic()
        if pretraining_running(self.run_dir) is not False:
            self.free_since = None
        else:
            self.free_since = now if self.free_since is None else self.free_since
            if self.finished():
                return "the pretraining has finished without writing them"
            if now - self.free_since >= self.grace_s:
                return (f"the pretraining is not running (no live process has held its {LOCK} for {self.grace_s:g} "
                        f"s) and no snapshot came meanwhile")
        if self.timeout_s is not None and now - self.since >= self.timeout_s:
            return f"timed out after {self.timeout_s:g} s with no new snapshot (--timeout)"
        return None

    def finished(self) -> bool:
        """Whether the run's last checkpoint completed every epoch: read once per version of the file (it is
        large, and looked at only while no process holds the lock)."""
        try:
            stat = (self.run_dir / checkpoint.LAST).stat()
        except OSError:
            return False
        if self._checked != (stat.st_mtime_ns, stat.st_size):
            self._checked = (stat.st_mtime_ns, stat.st_size)
            try:
                self._finished = checkpoint.finished(self.run_dir, schedule(self.run_dir)[1])
            except UserError:  # unreadable (being replaced, say): not known to be finished
                self._finished = False
        return self._finished

    def sleep(self, poll_s: float) -> None:
        """Until the next look, or the first deadline before it."""
        now, waits = time.monotonic(), [poll_s]
        if self.free_since is not None:
            waits.append(self.free_since + self.grace_s - now)
        if self.timeout_s is not None:
            waits.append(self.since + self.timeout_s - now)
        time.sleep(max(0.0, min(waits)))


def evaluate_snapshots(run_dir: Path, out: Path, evaluate: Callable[[Path, Path, dict, bool], Path], *,
                       follow: bool = False, poll_s: float = 60.0, grace_s: float = 3600.0,
                       timeout_s: float | None = None, log: Callable[[str], None] = print) -> list[Path]:
    """Evaluate every snapshot of ``run_dir`` not evaluated yet into ``out``; the records written.

    ``evaluate(snapshot, output_dir, extra, resume)`` runs one evaluation and returns its record. With ``follow``,
    wait (looking every ``poll_s`` seconds) until every snapshot the run is to keep has been evaluated; raise
    :class:`FollowEnded` when the pretraining has finished without some of them, when no live process has held
    its lock for ``grace_s`` seconds with no new snapshot, or when no new snapshot came for ``timeout_s``. Those
    clocks count waiting only: they start again after each round of evaluations.
    """
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run directory")
    expected = expected_snapshots(run_dir)
    if follow and not expected:
        raise ConfigError(f"{run_dir}: the run keeps no snapshots (run.keep_every is 0): nothing to follow")
    records: list[Path] = []
    waiting, waiting_for = _Waiting(run_dir, grace_s, timeout_s), None
    while True:
        present = present_snapshots(run_dir)
        pending = [name for name in present if not (out / name.removesuffix(".pth.tar") / "result.json").is_file()]
        for name in pending:
            epoch = int(SNAPSHOT.fullmatch(name).group(1)) + 1  # type: ignore[union-attr]
            target = out / name.removesuffix(".pth.tar")
            log(f"snapshot {name} (epoch {epoch}): linear evaluation into {target}")
            records.append(evaluate(run_dir / name, target, {"snapshot": {"run": str(run_dir), "epoch": epoch}},
                                    last_checkpoint(target, "eval linear") is not None))
        done = {name for name in expected if (out / name.removesuffix(".pth.tar") / "result.json").is_file()}
        missing = [name for name in expected if name not in done]
        if not follow or not missing:
            if follow:
                log(f"all {len(expected)} snapshots of {run_dir} are evaluated")
            elif not records and not pending:
                log(f"{run_dir}: no snapshot left to evaluate" if present_snapshots(run_dir) else
                    f"{run_dir}: no snapshots (checkpoint_NNNN.pth.tar; pretrain with --set run.keep_every=N)")
            return records
        if pending:
            waiting.restart()
        why = waiting.why_not()
        if why and present_snapshots(run_dir) != present:  # one came as the run ended: evaluate it first
            continue
        if why:
            raise FollowEnded(f"{run_dir}: stopped waiting for {len(missing)} snapshot(s) ({missing[0]}" +
                              (", ..." if len(missing) > 1 else "") + f"): {why}; {len(done)} of {len(expected)} "
                              f"evaluated")
        if missing[0] != waiting_for:
            waiting_for = missing[0]
            log(f"waiting for {waiting_for} ({len(missing)} snapshot(s) to come; checking every {poll_s:g} s)")
        sys.stdout.flush()
        waiting.sleep(poll_s)
