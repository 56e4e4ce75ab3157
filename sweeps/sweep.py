"""The paper's ablations as one command: a pretraining per value of K or m, each followed by an evaluation.

Figure 3 of the paper (arXiv 1911.05722) plots linear accuracy against the dictionary size K for the three
mechanisms; its momentum table shows that m = 0 fails to train and that 0.999 is best. ``run_sweep`` runs one
pretraining per value into ``OUT/<param>=<value>/pretrain`` and evaluates it into ``OUT/<param>=<value>/<eval>``,
whose ``result.json`` carries a ``sweep`` field ({"param", "value", "method"}) and a ``status``: "ok", or
"failed" with the reason, so that ``moco report`` can plot the curve and mark the runs that did not train.

For end2end the dictionary is the mini-batch, so its K is the batch size (as the paper's Figure 3 plots it).
A point whose pretraining already finished is not run again, and one whose evaluation already wrote its record
is skipped: rerunning an interrupted sweep continues where it stopped.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moco_core import checkpoint
from moco_core.config import ConfigError, PretrainConfig, replace, validated
from moco_core.errors import NonFiniteLossError

# The swept parameter as the command names it -> as records and the report name it
RECORD_NAMES = {"K": "queue_size", "m": "momentum"}
PARAMS = tuple(RECORD_NAMES)
# A run fails when its last epoch's loss stays within this fraction of the loss of uniform logits.
FAIL_FRACTION = 0.98


@dataclass(frozen=True)
class SweepPoint:
    """One value of the sweep and what came of it."""

    value: float
    run_dir: Path
    record: Path | None
    status: str  # "ok" or "failed"
    failure: str | None
    metrics: dict[str, float]


def parse_values(param: str, text: str) -> list[float]:
    """``"256,1024,4096"`` -> [256, 1024, 4096]; K must be whole numbers >= 1, m in [0, 1]."""
    if param not in PARAMS:
        raise ConfigError(f"sweep: unknown parameter {param!r}; expected one of {list(PARAMS)}")
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"sweep: values must be numbers separated by commas, got {text!r}") from None
    if not values:
        raise ConfigError("sweep: no values given")
    for v in values:
        if param == "K" and (v < 1 or v != int(v)):
            raise ConfigError(f"sweep: K must be a whole number >= 1, got {v:g}")
        if param == "m" and not 0.0 <= v <= 1.0:
            raise ConfigError(f"sweep: m must be in [0, 1], got {v:g}")
    return [int(v) if param == "K" else v for v in values]


def point_config(cfg: PretrainConfig, param: str, value: float, run_dir: Path) -> PretrainConfig:
    """``cfg`` with the swept setting changed and its own run directory."""
    if param == "m":
        change: dict[str, Any] = {"model": {"momentum": float(value)}}
    elif cfg.method == "end2end":
        change = {"optim": {"batch_size": int(value)}}  # the dictionary is the batch
    else:
        change = {"model": {"queue_size": int(value)}}
    return validated(replace(cfg, **change, run={"output_dir": str(run_dir)}))


def chance_loss(cfg: PretrainConfig) -> float | None:
    """The InfoNCE loss of uniform logits, ln(1 + K): what a run that learned nothing stays at."""
    if cfg.method in ("moco", "memory-bank"):
        return math.log(1 + cfg.model.queue_size)
    if cfg.method == "end2end":
        return math.log(cfg.optim.batch_size)  # one positive and batch - 1 negatives
    return None


def epoch_losses(run_dir: Path) -> list[float]:
    """The per-epoch mean losses that pretraining logged to ``metrics.jsonl``."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    # null: an epoch whose steps had no negative (an empty queue's one-step epoch) has no loss to judge by
    return [row["epoch_loss"] for row in rows if isinstance(row.get("epoch_loss"), (int, float))]


def training_failure(cfg: PretrainConfig, run_dir: Path) -> str | None:
    """Why the run counts as failed (its loss never left chance level), or None."""
    losses, chance = epoch_losses(run_dir), chance_loss(cfg)
    if not losses:
        return "no epoch finished"
    if chance is not None and losses[-1] >= FAIL_FRACTION * chance:
        return (f"the loss stayed at chance level: last epoch {losses[-1]:.3f}, uniform logits give "
                f"ln(1+K) = {chance:.3f}")
    return None


Evaluate = Callable[[Path, Path, dict[str, Any]], tuple[Path, dict[str, float]]]


def run_sweep(
    cfg: PretrainConfig, param: str, values: list[float], output_dir: Path, evaluate: Evaluate, *,
    eval_name: str, show_progress: bool = True,
) -> list[SweepPoint]:
    """Pretrain and evaluate each value; ``evaluate(checkpoint, out_dir, extra) -> (record, metrics)``."""
    from moco_core.train import pretrain  # torch loads only when a sweep runs

    name = RECORD_NAMES[param]
    points = []
    for value in values:
        point_dir = output_dir / f"{name}={value:g}"
        run_dir, eval_dir = point_dir / "pretrain", point_dir / eval_name
        pcfg = point_config(cfg, param, value, run_dir)
        print(f"sweep: {name} = {value:g} ({cfg.method}) -> {point_dir}", file=sys.stderr)
        failure = None
        if not checkpoint.finished(run_dir, pcfg.optim.epochs):
            resume = run_dir if (run_dir / checkpoint.LAST).is_file() else None
            try:
                pretrain(pcfg, resume=resume, show_progress=show_progress)
            except NonFiniteLossError as err:
                failure = f"the loss diverged: {err}"
        failure = failure or training_failure(pcfg, run_dir)
        extra = {"sweep": {"param": name, "value": value, "method": cfg.method},
                 "status": "failed" if failure else "ok", "failure": failure}
        record, metrics = None, {}
        if (eval_dir / "result.json").is_file():
            record = eval_dir / "result.json"
            metrics = json.loads(record.read_text()).get("metrics", {})
        elif (run_dir / checkpoint.LAST).is_file():
            record, metrics = evaluate(run_dir / checkpoint.LAST, eval_dir, extra)
        if failure:
            print(f"sweep: {name} = {value:g} failed: {failure}", file=sys.stderr)
        points.append(SweepPoint(value, run_dir, record, extra["status"], failure, metrics))
    return points


def summary(points: list[SweepPoint], param: str) -> str:
    """A plain table of the sweep: value, status, top-1."""
    name = RECORD_NAMES[param]
    lines = [f"{name:>12}  {'status':<7} top1"]
    for p in points:
        top1 = f"{p.metrics['top1']:.2f}" if "top1" in p.metrics else "-"
        lines.append(f"{p.value:>12g}  {p.status:<7} {top1}" + (f"  ({p.failure})" if p.failure else ""))
    return "\n".join(lines)
