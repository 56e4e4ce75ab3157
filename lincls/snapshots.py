"""``moco eval snapshots``: the linear protocol on every snapshot a pretraining keeps (``run.keep_every``).

Each snapshot ``checkpoint_NNNN.pth.tar`` of the run directory gets its own evaluation directory,
``OUT/checkpoint_NNNN``; its record carries ``snapshot: {run, epoch}``, and ``moco report`` plots those top-1
values against the pretraining's epochs beside its loss and kNN curves. A finished evaluation is skipped and an
interrupted one resumed, so the command can be run again at any time. With ``follow`` it also waits for the
snapshots the run is still to write (from its config.yaml: every ``keep_every`` epochs up to ``optim.epochs``),
evaluating each as it appears: beside the pretraining, on the same machine or as a job of its own.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from moco_core.checkpoint import LINEAR_LAST, snapshot_name
from moco_core.config import ConfigError

SNAPSHOT = re.compile(r"checkpoint_(\d{4,})\.pth\.tar")


def expected_snapshots(run_dir: Path) -> list[str]:
    """The snapshots the run's config.yaml says it will keep (empty when it keeps none)."""
    try:
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
        every, epochs = int(cfg["run"]["keep_every"]), int(cfg["optim"]["epochs"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        raise ConfigError(f"{run_dir}: not a pretraining run directory (no readable config.yaml)") from None
    return [snapshot_name(e) for e in range(epochs) if every and (e + 1) % every == 0]


def present_snapshots(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.iterdir() if SNAPSHOT.fullmatch(p.name))


def evaluate_snapshots(run_dir: Path, out: Path, evaluate: Callable[[Path, Path, dict, bool], Path], *,
                       follow: bool = False, poll_s: float = 60.0, log: Callable[[str], None] = print) -> list[Path]:
    """Evaluate every snapshot of ``run_dir`` not evaluated yet into ``out``; the records written.

    ``evaluate(snapshot, output_dir, extra, resume)`` runs one evaluation and returns its record. With ``follow``,
    wait (polling every ``poll_s`` seconds) until every snapshot the run is to keep has been evaluated.
    """
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run directory")
    expected = expected_snapshots(run_dir)
    if follow and not expected:
        raise ConfigError(f"{run_dir}: the run keeps no snapshots (run.keep_every is 0): nothing to follow")
    records, waiting_for = [], None
    while True:
        pending = [name for name in present_snapshots(run_dir) if not (out / name.removesuffix(".pth.tar") /
                                                                        "result.json").is_file()]
        for name in pending:
            epoch = int(SNAPSHOT.fullmatch(name).group(1)) + 1  # type: ignore[union-attr]
            target = out / name.removesuffix(".pth.tar")
            log(f"snapshot {name} (epoch {epoch}): linear evaluation into {target}")
            records.append(evaluate(run_dir / name, target, {"snapshot": {"run": str(run_dir), "epoch": epoch}},
                                    (target / LINEAR_LAST).is_file()))
        done = {name for name in expected if (out / name.removesuffix(".pth.tar") / "result.json").is_file()}
        missing = [name for name in expected if name not in done]
        if not follow or not missing:
            if not records and not pending:
                log(f"{run_dir}: no snapshot left to evaluate" if present_snapshots(run_dir) else
                    f"{run_dir}: no snapshots (checkpoint_NNNN.pth.tar; pretrain with --set run.keep_every=N)")
            return records
        if missing[0] != waiting_for:
            waiting_for = missing[0]
            log(f"waiting for {waiting_for} ({len(missing)} snapshot(s) to come; checking every {poll_s:g} s)")
        sys.stdout.flush()
        time.sleep(poll_s)
