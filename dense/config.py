"""``moco eval linseg``'s config: frozen patch features, per-patch logistic regression (the fast mode)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from moco_core.config import load_config, require, run_checks
from moco_core.frozen.logreg import PRECISIONS
from moco_core.model.weights.formats import format_checks

# L2 strengths swept (C = 1 / lambda on the summed loss, moco_core.frozen.logreg): 8 decades, every one. The
# transfer protocol's 45 values cost 45 fits, too many on millions of patches; a decade apart is CAPI-style.
LINSEG_LAMBDAS = (1e-2, 1e-1, 1.0, 10.0, 100.0, 1e3, 1e4, 1e5)


@dataclass(frozen=True)
class LinsegDataConfig:
    path: str | None = None  # a folder holding ADEChallengeData2016/ as released, or "embedded"
    num_classes: int = 150  # ADE20K's 150 (label values 1-150, 0 ignored); the embedded set's 9


@dataclass(frozen=True)
class LinsegInputConfig:
    # Every image resized to size x size (aspect not kept): 448 gives a /16 ViT 28 x 28 patches, a ResNet's
    # stride-32 layer4 14 x 14. Deviation from DINOv2's linear protocol (512 crops, sliding window): fast mode.
    size: int = 448
    tap: str | None = None  # None: a ViT's last block's patch tokens ("patch"), a ResNet's layer4
    batch_size: int = 32  # images a forward pass
    amp: bool = True  # bf16 autocast on CUDA (fp32 on CPU)


@dataclass(frozen=True)
class LinsegSolverConfig:
    lambdas: tuple[float, ...] = LINSEG_LAMBDAS
    heldout: float = 0.1  # the fraction of train images held out to choose lambda on (never val)
    max_patches: int = 2_000_000  # labelled train patches fitted at most (a seeded draw; 0: all)
    max_iter: int = 1000  # L-BFGS iterations a fit (moco_core.frozen.logreg)
    precision: str = "float32"  # of the two matrix products an evaluation (float64: everything)


@dataclass(frozen=True)
class LinsegKnnConfig:
    # Weighted kNN a patch beside the logistic regression (InstDisc's vote, moco_core.run.knn), the drawn train
    # patches its bank: fixed, not chosen, so nothing of it is selected on any split.
    k: int = 20  # neighbours a patch (0: no kNN)
    temperature: float = 0.07  # vote weight exp(cosine / T) (InstDisc: 0.07)


@dataclass(frozen=True)
class LinsegRunConfig:
    output_dir: str | None = None  # None: runs/<preset>/<weights> (moco_core/run/naming.py)
    device: str = "auto"
    seed: int = 0  # the held-out images, the patches drawn, and the weights of "random"
    weights_format: str | None = None  # the method of weights whose file does not say (--weights-format)


@dataclass(frozen=True)
class LinsegConfig:
    """``moco eval linseg``: linear semantic segmentation on frozen patch features, fast mode (issue 59)."""

    arch: str | None = None  # None: read from the weights ("random" needs it)
    data: LinsegDataConfig = field(default_factory=LinsegDataConfig)
    input: LinsegInputConfig = field(default_factory=LinsegInputConfig)
    solver: LinsegSolverConfig = field(default_factory=LinsegSolverConfig)
    knn: LinsegKnnConfig = field(default_factory=LinsegKnnConfig)
    run: LinsegRunConfig = field(default_factory=LinsegRunConfig)


def load_linseg_config(config: str | None, overrides: list[str], flags: dict[str, Any] | None = None) -> LinsegConfig:
    """Defaults < YAML < ``--set`` < explicit flags, validated: one-line errors naming the key."""
    cfg: LinsegConfig = load_config(LinsegConfig, config, overrides, flags=flags)
    s, i = cfg.solver, cfg.input
    bad = next((v for v in s.lambdas if not 0 < v < math.inf), None)
    require([
        (cfg.data.path is not None, "data.path", "not set: pass --data ROOT (holding ADEChallengeData2016/) or "
         "--data embedded"),
        (1 <= cfg.data.num_classes <= 254, "data.num_classes", f"must be 1-254 (8-bit label values, 0 ignored), got "
         f"{cfg.data.num_classes}"),
        (32 <= i.size <= 4096, "input.size", f"must be 32-4096 pixels, got {i.size}"),
        (i.batch_size >= 1, "input.batch_size", f"must be >= 1, got {i.batch_size}"),
        (bool(s.lambdas), "solver.lambdas", "must name at least one L2 strength"),
        (bad is None, "solver.lambdas", f"each must be finite and > 0, got {bad}"),
        (0 < s.heldout < 1, "solver.heldout", f"must be a fraction in (0, 1), got {s.heldout}"),
        (s.max_patches >= 0, "solver.max_patches", f"must be >= 0 (0: all), got {s.max_patches}"),
        (s.max_iter >= 1, "solver.max_iter", f"must be >= 1, got {s.max_iter}"),
        (cfg.knn.k >= 0, "knn.k", f"must be >= 0 (0: no kNN), got {cfg.knn.k}"),
        (0 < cfg.knn.temperature < math.inf, "knn.temperature", f"must be finite and > 0, got {cfg.knn.temperature}"),
        (s.precision in PRECISIONS, "solver.precision", f"must be one of {', '.join(PRECISIONS)}, got "
         f"{s.precision!r}"),
        *run_checks(cfg.run.device, cfg.run.seed),
        *format_checks(cfg.run.weights_format),
    ])
    return cfg
