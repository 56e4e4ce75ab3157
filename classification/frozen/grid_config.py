"""The configuration of ``moco eval linear --grid``: the heads, their training, how one is chosen, the data and
the robustness sets. Defaults are DINOv2's linear evaluation (facebookresearch/dinov2 ``eval/linear.py``)
where it has one, and this suite's where DINOv2's would select on the reported set."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from classification.frozen.fewshot import fewshot_checks
from classification.frozen.heads import DINOV2_LRS
from classification.robustness import SETS
from classification.splits import LinearDataConfig, subset_checks
from moco_core.config import ConfigError, divisor_check, load_config, presets_for, require, run_checks
from moco_core.frozen.logreg import LAMBDAS
from moco_core.model.taps import RESNET_TAPS, VIT_TAPS
from moco_core.model.weights.formats import format_checks


@dataclass(frozen=True)
class GridHeadsConfig:
    lrs: tuple[float, ...] = DINOV2_LRS  # per 256 images, times global batch / 256 (DINOv2's 13 and its rule)
    # The features read, each fed to one head per lr. Empty: by backbone, a ViT's cls, cls+avg, cls4, cls4+avg
    # (DINOv2's last 1 or 4 blocks, with or without the patch average); a ResNet's layer4 (the paper's feature);
    # earlier ResNet stages (layer3, layer2, layer1) when named here.
    taps: tuple[str, ...] = ()


@dataclass(frozen=True)
class GridOptimConfig:
    batch_size: int = 1024  # global; DINOv2: 128 a GPU on 8 GPUs (its lrs assume 1,024, dinov2 issue 232)
    epochs: int = 10  # DINOv2: 12,500 iterations of 1,024 images, 10 ImageNet epochs
    momentum: float = 0.9  # DINOv2's SGD
    weight_decay: float = 0.0


@dataclass(frozen=True)
class SelectConfig:
    # "holdout": the head with the best top-1 on a split held out from train (classification/frozen/selection.py)
    # "val": on val, the reported set (DINOv2's default): optimistic, and labelled so in the record and the report
    split: Literal["holdout", "val"] = "holdout"  # the split the head is chosen on
    holdout_fraction: float = 0.1  # of each class's train images (DINOv2's logistic regression holds out 10%)
    seed: int = 0  # draws the held-out split; not run.seed, so trials of other seeds select on the same images


@dataclass(frozen=True)
class RobustnessConfig:
    root: str | None = None  # a folder holding the sets as released (classification/robustness.py); None: none
    sets: tuple[str, ...] = tuple(SETS)


@dataclass(frozen=True)
class FewShotConfig:
    """``--shots``: few-shot linear (L2 logistic regression, classification/frozen/fewshot.py) and kNN on the
    backbone's center-crop features, cached (moco_core/frozen/features.py), instead of the grid."""

    shots: tuple[int, ...] = ()  # k labelled train images a class, e.g. (1, 5, 10); (): no few-shot (the grid)
    tries: int = 5  # draws of each k (seeds recorded)
    seed: int = 0  # draws the k-shot subsets
    knn_k: int = 20  # neighbours of the kNN vote (at most the k-shot bank), weights exp(similarity / T)
    knn_temperature: float = 0.07  # InstDisc's T, as moco eval knn
    max_iter: int = 1000  # L-BFGS iterations a lambda
    lambdas: tuple[float, ...] = LAMBDAS  # the L2 strengths swept: the transfer protocol's 45, 1e-6 .. 1e5


@dataclass(frozen=True)
class GridRunConfig:
    output_dir: str | None = None  # None: runs/<preset>/<weights>, runs/linear_grid/<weights> without a preset
    device: str = "auto"
    seed: int = 0  # draws the heads' initial weights and the order of the train images
    amp: bool = True  # bf16 autocast of the backbone on CUDA; the heads train in fp32 (as DINOv2's .float())
    log_every: int = 10
    loggers: tuple[str, ...] = ()
    weights_format: str | None = None  # the method of weights whose file does not say (--weights-format)


@dataclass(frozen=True)
class GridConfig:
    """``moco eval linear --grid``: many linear heads on one frozen pass, one chosen on held-out data."""

    arch: str | None = None  # None: read from the weights ("random" needs it)
    grid: GridHeadsConfig = field(default_factory=GridHeadsConfig)
    optim: GridOptimConfig = field(default_factory=GridOptimConfig)
    select: SelectConfig = field(default_factory=SelectConfig)
    # DINOv2's heads train on RandomResizedCrop(224) + flip and are evaluated on Resize(256) + CenterCrop(224)
    data: LinearDataConfig = field(default_factory=LinearDataConfig)
    robustness: RobustnessConfig = field(default_factory=RobustnessConfig)
    fewshot: FewShotConfig = field(default_factory=FewShotConfig)
    run: GridRunConfig = field(default_factory=GridRunConfig)


def protocol_name(cfg: GridConfig) -> str:
    """The record's ``protocol``: "linear-grid" (chosen on held-out train images), or
    "linear-grid-selected-on-val" (chosen on the reported set: a table of its own, never beside the other); a
    few-shot run's "fewshot" (lambda chosen on held-out train images) or "fewshot-selected-on-val"."""
    kind = "fewshot" if cfg.fewshot.shots else "linear-grid"
    return kind if cfg.select.split == "holdout" else f"{kind}-selected-on-val"


def parse_shots(text: str | None) -> tuple[int, ...] | None:
    """``--shots 1,5,10`` as a tuple; None when not given."""
    from moco_core.config import ConfigError

    if text is None:
        return None
    try:
        shots = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        shots = ()
    if not shots or min(shots) < 1:
        raise ConfigError(f"--shots: expected numbers >= 1 separated by commas, e.g. 1,5,10; got {text!r}")
    return shots


def validate_grid(cfg: GridConfig) -> GridConfig:
    g, o, s, d = cfg.grid, cfg.optim, cfg.select, cfg.data
    bad_lr = next((lr for lr in g.lrs if not 0 < lr < math.inf), None)
    known = (*RESNET_TAPS, *VIT_TAPS)
    bad_tap = next((t for t in g.taps if t not in known and not t.removesuffix("+avg").removeprefix("cls").isdigit()),
                   None)
    root = cfg.robustness.root
    require([
        (bool(g.lrs), "grid.lrs", "must name at least one learning rate"),
        (bad_lr is None, "grid.lrs", f"each must be finite and > 0, got {bad_lr}"),
        (len(set(g.lrs)) == len(g.lrs), "grid.lrs", f"{list(g.lrs)} names a value twice"),
        (bad_tap is None, "grid.taps", f"unknown feature {bad_tap!r} (a ResNet's: {', '.join(RESNET_TAPS)}; a "
         f"ViT's: {', '.join(VIT_TAPS)})"),
        (len(set(g.taps)) == len(g.taps), "grid.taps", f"{list(g.taps)} names a feature twice"),
        (o.batch_size >= 1, "optim.batch_size", f"must be >= 1, got {o.batch_size}"),
        (o.epochs >= 1, "optim.epochs", f"must be >= 1, got {o.epochs}"),
        (0 <= o.momentum < math.inf and 0 <= o.weight_decay < math.inf, "optim", "momentum and weight_decay must be "
         "finite and >= 0"),
        (0 < s.holdout_fraction <= 0.5, "select.holdout_fraction", f"must be in (0, 0.5], got "
         f"{s.holdout_fraction}"),
        (s.seed >= 0, "select.seed", f"must be >= 0, got {s.seed}"),
        (d.path is not None, "data.path", "not set: pass --data DIR (with train/ and val/) or --data embedded"),
        (8 <= d.crop_size <= d.resize, "data.crop_size", f"need 8 <= crop_size <= resize, got {d.crop_size} and "
         f"{d.resize}"),
        (d.workers >= 0, "data.workers", f"must be >= 0, got {d.workers}"),
        (root is None or Path(root).expanduser().is_dir(), "robustness.root", f"{root!r}: no such folder"),
        (len(set(cfg.robustness.sets)) == len(cfg.robustness.sets), "robustness.sets", "names a set twice"),
        (all(n in SETS for n in cfg.robustness.sets), "robustness.sets", f"known sets: {', '.join(SETS)}"),
        (cfg.run.log_every >= 1, "run.log_every", f"must be >= 1, got {cfg.run.log_every}"),
        *fewshot_checks(cfg.fewshot.shots, cfg.fewshot.tries, cfg.fewshot.seed),
        (cfg.fewshot.knn_k >= 1, "fewshot.knn_k", f"must be >= 1, got {cfg.fewshot.knn_k}"),
        (0 < cfg.fewshot.knn_temperature < math.inf, "fewshot.knn_temperature", "must be finite and > 0"),
        divisor_check("fewshot.knn_temperature", cfg.fewshot.knn_temperature),
        (cfg.fewshot.max_iter >= 1, "fewshot.max_iter", f"must be >= 1, got {cfg.fewshot.max_iter}"),
        (bool(cfg.fewshot.lambdas) and all(0 < v < math.inf for v in cfg.fewshot.lambdas), "fewshot.lambdas",
         "must be finite values > 0, at least one"),
        (not cfg.fewshot.shots or cfg.robustness.root is None, "robustness.root", "scores the grid's chosen "
         "head; a few-shot run (fewshot.shots) has none"),
        *subset_checks(d),
        *run_checks(cfg.run.device, cfg.run.seed, cfg.run.loggers),
        *format_checks(cfg.run.weights_format),
    ])
    return cfg


def load_grid_config(config: str | None, overrides: list[str], flags: dict[str, Any] | None = None) -> GridConfig:
    """Defaults < YAML < ``--set`` < explicit flags (None: not given), validated once on the result. A preset of
    the paper's protocol (``lincls_32px``: its lr and milestones) is refused as such, naming the grid's presets,
    not by the first of its keys the grid lacks."""
    if config is not None and not is_grid_config(config):
        try:
            load_config(GridConfig, config, check=False)
        except ConfigError as err:
            grids = [name for name in presets_for("linear") if is_grid_config(name)]
            raise ConfigError(f"-c {config}: not a preset of the grid or few-shot ({err}); --grid and --shots take "
                              f"{', '.join(grids)} (small images: lincls_grid_32px, lincls_fewshot_32px)") from None
    return validate_grid(load_config(GridConfig, config, overrides, flags=flags))


def is_grid_config(config: str | None) -> bool:
    """Whether ``config`` (a preset or YAML file, ``_base_`` chains followed) configures a head grid: it has a
    ``grid`` section (``lincls_grid``, ``lincls_grid_embedded``), which the paper's protocol has not."""
    from moco_core.config import preset_path, read_yaml

    return config is not None and "grid" in read_yaml(preset_path(config, "linear"))


def sets_shots(config: str | None) -> bool:
    """Whether ``config`` (``_base_`` chains followed) is a few-shot preset: it sets ``fewshot.shots``."""
    from moco_core.config import preset_path, read_yaml

    return config is not None and bool((read_yaml(preset_path(config, "linear")).get("fewshot") or {}).get("shots"))
