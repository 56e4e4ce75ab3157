"""The paper's ablations as one command: a pretraining per value of K or m, each followed by an evaluation.

Figure 3 of the paper (arXiv 1911.05722) plots linear accuracy against the dictionary size K for the three
mechanisms; its momentum table shows that m = 0 fails to train and that 0.999 is best. ``run_sweep`` runs one
pretraining per value into ``OUT/<param>=<value>/pretrain`` and evaluates it into ``OUT/<param>=<value>/<eval>``,
whose ``result.json`` carries a ``sweep`` field ({"param", "value", "method"}) and a ``status``: "ok", or
"failed" with the reason, so that ``moco report`` can plot the curve and mark the runs that did not train.

For end2end the dictionary is the mini-batch, so its K is the batch size (as the paper's Figure 3 plots it).
MoCo v3 (``method: mocov3``, arXiv 2104.02057) has no queue: its m sweep sets ``v3.momentum``, the start of the
cosine schedule to 1 (the v3 paper's momentum ablation), and a K sweep is refused.
A point whose pretraining already finished is not run again, and one whose evaluation already wrote its record
is skipped: rerunning an interrupted sweep continues where it stopped. A stop signal stops the whole sweep once
the step under way has stopped (:class:`moco_core.run.preemption.Stopper`); a stopped pretraining is not evaluated.

With several trials the whole sweep runs once per seed, into ``OUT/seed_<s>/``: the points' records then differ
only in their pretraining's seed (``backbone.pretrain.config.run.seed``), and ``moco report`` gathers the records
of one ``sweep`` field as trials of that point.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moco_core import checkpoint
from moco_core.config import VIT_ARCHS, ConfigError, replace, validated
from moco_core.errors import NonFiniteLossError
from moco_core.pretrain_config import PretrainConfig
from moco_core.run.preemption import Stopper
from moco_core.user_files import LIST_LIMIT, parse_json_lines, read_bytes, read_json

# The swept parameter as the command names it -> as records and the report name it
RECORD_NAMES = {"K": "queue_size", "m": "momentum"}
PARAMS = tuple(RECORD_NAMES)
# A run fails when its last epoch's loss stays within this fraction of the loss of uniform logits.
FAIL_FRACTION = 0.98


@dataclass(frozen=True)
class SweepPoint:
    """One value of the sweep and what came of it."""

    value: float
    seed: int  # the pretraining's (and the evaluation's)
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


def check_sweep(cfg: PretrainConfig, param: str) -> None:
    """Refuse (one line) a sweep the method has no setting for: K of MoCo v3, which keeps no queue."""
    if param == "K" and cfg.method == "mocov3":
        raise ConfigError("sweep K: method mocov3 has no queue (its negatives are the other keys of the batch); "
                          "sweep m (v3.momentum) instead")


def linear_preset(cfg: PretrainConfig) -> str | None:
    """The linear-evaluation preset a sweep uses when ``--eval-config`` is not given (None: LinearConfig's
    defaults, the v1/v2 paper's protocol). MoCo v3's protocol differs (the official main_lincls.py of moco-v3),
    and a ViT's more (its class token, another lr). Each protocol has a full-size preset and an embedded one: the
    embedded one where the pretraining's crops are the embedded presets' (a sweep of ``-c embedded`` evaluated at
    224-px crops for 100 epochs would be a silent trap), else the full-size one."""
    from classification.linear import MOCOV3_PRESETS, load_linear_config

    if cfg.method != "mocov3":
        full, embedded = None, "lincls_embedded"
    else:
        full, embedded = MOCOV3_PRESETS["vit" if cfg.model.arch in VIT_ARCHS else "resnet"]
    small = load_linear_config(embedded, [], flags={"data": {"path": "embedded"}}).data.crop_size
    return embedded if cfg.augment.crop_size == small else full


def point_config(cfg: PretrainConfig, param: str, value: float, run_dir: Path) -> PretrainConfig:
    """``cfg`` with the swept setting changed and its own run directory."""
    check_sweep(cfg, param)
    if param == "m" and cfg.method == "mocov3":
        change: dict[str, Any] = {"v3": {"momentum": float(value)}}  # the cosine schedule's start
    elif param == "m":
        change = {"model": {"momentum": float(value)}}
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
    rows, _ = parse_json_lines(read_bytes(path, limit=LIST_LIMIT, what="metrics file"))
    # null: an epoch whose steps had no negative (an empty queue's one-step epoch) has no loss to judge by
    return [row["epoch_loss"] for row in rows
            if isinstance(row, dict) and isinstance(row.get("epoch_loss"), (int, float))]


def training_failure(cfg: PretrainConfig, run_dir: Path) -> str | None:
    """Why the run counts as failed (its loss never left chance level), or None."""
    losses, chance = epoch_losses(run_dir), chance_loss(cfg)
    if not losses:
        return "no epoch finished"
    if chance is not None and losses[-1] >= FAIL_FRACTION * chance:
        return (f"the loss stayed at chance level: last epoch {losses[-1]:.3f}, uniform logits give "
                f"ln(1+K) = {chance:.3f}")
    return None


Evaluate = Callable[[Path, Path, dict[str, Any], int], tuple[Path, dict[str, float]]]


def run_sweep(
    cfg: PretrainConfig, param: str, values: list[float], output_dir: Path, evaluate: Evaluate, *,
    eval_name: str, show_progress: bool = True, trials: int = 1, seed: int | None = None,
) -> list[SweepPoint]:
    """Pretrain and evaluate each value; ``evaluate(checkpoint, out_dir, extra, seed) -> (record, metrics)``.

    ``trials`` > 1: the whole sweep once per seed (``seed``, ``seed + 1``, ...; default from ``cfg.run.seed``),
    each into ``output_dir/seed_<s>``. A stop signal raises :class:`moco_core.run.preemption.Stopped`.
    """
    if trials < 1:
        raise ConfigError(f"--trials: must be >= 1, got {trials}")
    first = cfg.run.seed if seed is None else seed
    roots = [output_dir] if trials == 1 else [output_dir / f"seed_{first + t}" for t in range(trials)]
    points = []
    with Stopper() as stopper:
        for t, root in enumerate(roots):
            seeded = replace(cfg, run={"seed": first + t})
            points += [_point(seeded, param, value, root, evaluate, eval_name, show_progress, stopper)
                       for value in values]
    return points


def _point(cfg: PretrainConfig, param: str, value: float, output_dir: Path, evaluate: Evaluate, eval_name: str,
           show_progress: bool, stopper: Stopper) -> SweepPoint:
    """One point: its pretraining (unless finished), then its evaluation (unless recorded)."""
    from moco_core.run.rundir import last_checkpoint
    from moco_core.run.train import pretrain  # torch loads only when a sweep runs

    name, seed = RECORD_NAMES[param], cfg.run.seed
    point_dir = output_dir / f"{name}={value:g}"
    run_dir, eval_dir = point_dir / "pretrain", point_dir / eval_name
    pcfg = point_config(cfg, param, value, run_dir)
    print(f"sweep: {name} = {value:g} ({cfg.method}, seed {seed}) -> {point_dir}", file=sys.stderr)
    failure = None
    if not checkpoint.finished(run_dir, pcfg.optim.epochs):
        stopper.doing = f"the pretraining of {point_dir}"
        resume = run_dir if last_checkpoint(run_dir, "pretrain") is not None else None
        try:
            pretrain(pcfg, resume=resume, show_progress=show_progress)
        except NonFiniteLossError as err:
            failure = f"the loss diverged: {err}"
        stopper.check()  # stopped part-way, its checkpoint written: not a result to evaluate
    failure = failure or training_failure(pcfg, run_dir)
    extra = {"sweep": {"param": name, "value": value, "method": cfg.method},
             "status": "failed" if failure else "ok", "failure": failure}
    record, metrics = None, {}
    if (eval_dir / "result.json").is_file():
        record = eval_dir / "result.json"
        done = read_json(record, what="record")
        metrics = done.get("metrics", {}) if isinstance(done, dict) else {}
    elif (run_dir / checkpoint.LAST).is_file():
        stopper.doing = f"the evaluation of {point_dir}"
        record, metrics = evaluate(run_dir / checkpoint.LAST, eval_dir, extra, seed)
    if failure:
        print(f"sweep: {name} = {value:g} failed: {failure}", file=sys.stderr)
    return SweepPoint(value, seed, run_dir, record, extra["status"], failure, metrics)


def summary(points: list[SweepPoint], param: str) -> str:
    """A plain table of the sweep: value, status, top-1 (and the seed, with several trials)."""
    name, seeds = RECORD_NAMES[param], len({p.seed for p in points}) > 1
    lines = [f"{name:>12}  " + ("seed  " if seeds else "") + f"{'status':<7} top1"]
    for p in points:
        top1 = f"{p.metrics['top1']:.2f}" if "top1" in p.metrics else "-"
        lines.append(f"{p.value:>12g}  " + (f"{p.seed:<4}  " if seeds else "") + f"{p.status:<7} {top1}" +
                     (f"  ({p.failure})" if p.failure else ""))
    return "\n".join(lines)
