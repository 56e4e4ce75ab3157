"""What every fine-tuning transfer task's config shares (detection: :mod:`transfer.detection.config`; semantic
segmentation: :mod:`transfer.segmentation.config`): the solver of :mod:`transfer.engine` and its checks, the run
section, the batch split over processes and the input normalisation taken from the weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from moco_core.config import Check, ConfigError, divisor_check, replace


@dataclass(frozen=True)
class SolverConfig:
    batch_size: int = 16  # images per iteration over all processes (IMS_PER_BATCH)
    lr: float = 0.02  # at batch 16; the effective lr is lr * batch_size / 16
    momentum: float = 0.9
    weight_decay: float = 1e-4
    weight_decay_norm: float = 0.0  # on BN weights and biases (detectron2's WEIGHT_DECAY_NORM)
    iterations: int = 24000
    steps: tuple[int, ...] = (18000, 22000)  # lr x gamma at each
    gamma: float = 0.1
    warmup_iters: int = 100  # linear warm-up (the VOC config; detectron2's default, used for COCO: 1000)
    warmup_factor: float = 0.001  # the warm-up starts at lr x this
    # Before testing, BN statistics are recomputed over this many training batches (the MoCo configs enable
    # detectron2's TEST.PRECISE_BN, 200 iterations): fine-tuned BN's running averages lag its weights. 0: off.
    precise_bn_iters: int = 200


@dataclass(frozen=True)
class TransferRunConfig:
    output_dir: str | None = None  # None: runs/<task>
    device: str = "auto"  # "auto": CUDA when available, else CPU
    seed: int = 0
    amp: bool = False  # bf16 autocast on CUDA; fp32 as detectron2's default when false
    log_every: int = 20  # iterations between metrics.jsonl lines
    checkpoint_every: int = 5000  # iterations between checkpoint writes (detectron2's CHECKPOINT_PERIOD)
    test_batch_size: int = 1  # test images per forward pass and process (detectron2: 1)
    loggers: tuple[str, ...] = ()  # mirrors of metrics.jsonl: "tensorboard", "wandb" (optional extras; README)
    weights_format: str | None = None  # the method of weights whose file does not say (--weights-format)


def per_process_batch(cfg: Any, world: int) -> int:
    """``solver.batch_size`` split over ``world`` processes; ConfigError when it does not divide."""
    if cfg.solver.batch_size % world:
        raise ConfigError(f"solver.batch_size: {cfg.solver.batch_size} is not divisible by the {world} processes")
    return cfg.solver.batch_size // world


def with_normalisation(cfg: Any, normalisation: dict[str, Any]) -> Any:
    """``cfg`` (a detection or segmentation config) with ``input.mean`` and ``input.std`` the weights'
    normalisation (``BackboneInfo.normalisation``) where the config leaves them null; as given otherwise."""
    i = cfg.input
    mean = i.mean if i.mean is not None else tuple(float(v) for v in normalisation["mean"])
    std = i.std if i.std is not None else tuple(float(v) for v in normalisation["std"])
    return replace(cfg, input={"mean": mean, "std": std})


def input_statistics(cfg: Any) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean, std) of ``cfg.input``, once :func:`with_normalisation` has filled in the weights' where they were
    null: a network is never built on statistics nobody chose."""
    i = cfg.input
    if i.mean is None or i.std is None:
        raise ConfigError("input.mean, input.std: null until the weights are read (transfer.config."
                          "with_normalisation fills in theirs)")
    return tuple(i.mean), tuple(i.std)


def input_checks(mean: tuple[float, ...] | None, std: tuple[float, ...] | None) -> list[Check]:
    return [(mean is None or all(math.isfinite(v) for v in mean), "input.mean", "must be finite numbers or null"),
            (std is None or all(math.isfinite(v) and v > 0 for v in std), "input.std",
             "must be positive numbers or null"),
            divisor_check("input.std", tuple(std or ()))]


def solver_checks(s: SolverConfig) -> list[tuple[bool, str, str]]:
    """The checks of a fine-tuning solver (batch, lr, weight decay, schedule, warm-up, precise BN), for every task
    that trains with :mod:`transfer.engine` (detection, semantic segmentation)."""
    return [
        (s.batch_size >= 1, "solver.batch_size", f"must be >= 1, got {s.batch_size}"),
        (s.lr > 0 and s.momentum >= 0, "solver.lr", "need lr > 0 and momentum >= 0"),
        (math.isfinite(s.lr), "solver.lr", f"must be finite, got {s.lr}"),
        (s.weight_decay >= 0 and s.weight_decay_norm >= 0, "solver.weight_decay", "must be >= 0"),
        (s.iterations >= 1, "solver.iterations", f"must be >= 1, got {s.iterations}"),
        (list(s.steps) == sorted(s.steps) and all(0 < m for m in s.steps), "solver.steps",
         f"need increasing positive iterations, got {list(s.steps)}"),
        (all(m < s.iterations for m in s.steps), "solver.steps", f"{list(s.steps)} fall outside a run of "
         f"{s.iterations} iterations (the lr would never drop there): set them below solver.iterations, or leave "
         f"them out to scale the preset's"),
        (s.warmup_iters >= 0 and 0 < s.warmup_factor <= 1, "solver.warmup_iters", "need >= 0 (factor in (0, 1])"),
        (s.warmup_iters < s.iterations, "solver.warmup_iters", f"{s.warmup_iters} is the whole run of "
         f"{s.iterations} iterations or more: the lr would never reach solver.lr"),
        (s.precise_bn_iters >= 0, "solver.precise_bn_iters", f"must be >= 0, got {s.precise_bn_iters}"),
    ]
