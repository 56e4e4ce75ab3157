"""``moco eval knn``: weighted kNN (k 200, T 0.07) on frozen features, no training; minutes instead of hours."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from classification.splits import SMALL_PRESETS, LinearDataConfig, dataset_record, load_splits, subset_checks
from moco_core.config import cpu_workers, divisor_check, load_config, require, run_checks
from moco_core.model import backbone
from moco_core.model.backbone import load_backbone
from moco_core.model.weights.formats import format_checks
from moco_core.run.knn import KnnMonitor, effective_k
from moco_core.run.records import write_record
from moco_core.run.rundir import require_writable
from moco_core.run.runtime import resolve_device


@dataclass(frozen=True)
class KnnRunConfig:
    output_dir: str | None = None  # None: runs/<preset>/<weights> (moco_core/run/naming.py)
    device: str = "auto"
    seed: int = 0  # draws the weights of "random" (as eval linear's run.seed)
    weights_format: str | None = None  # the method of weights whose file does not say (--weights-format)


@dataclass(frozen=True)
class KnnConfig:
    """``moco eval knn``: InstDisc's weighted kNN (arXiv 1805.01978) on frozen pooled features."""

    arch: str | None = None  # None: read from the weights ("random" needs it)
    k: int = 200  # neighbours (InstDisc: 200)
    temperature: float = 0.07  # vote weight exp(similarity / T) (InstDisc: 0.07)
    batch_size: int = 256  # images per forward pass
    # center crops: Resize(resize) + CenterCrop(crop_size), ImageNet's 256/224 (the embedded preset: 32)
    data: LinearDataConfig = field(default_factory=lambda: LinearDataConfig(workers=cpu_workers(4)))
    run: KnnRunConfig = field(default_factory=KnnRunConfig)


def load_knn_config(config: str | None, overrides: list[str], flags: dict[str, Any] | None = None) -> KnnConfig:
    """Defaults < YAML < ``--set`` < explicit flags, validated: one-line errors naming the key."""
    cfg: KnnConfig = load_config(KnnConfig, config, overrides, flags=flags)
    d = cfg.data
    require([
        (cfg.k >= 1, "k", f"must be >= 1, got {cfg.k}"),
        (0 < cfg.temperature < math.inf, "temperature", f"must be finite and > 0, got {cfg.temperature}"),
        divisor_check("temperature", cfg.temperature),
        (cfg.batch_size >= 1, "batch_size", f"must be >= 1, got {cfg.batch_size}"),
        (d.path is not None, "data.path", "not set: pass --data DIR (with train/ and val/) or --data embedded"),
        (8 <= d.crop_size <= d.resize, "data.crop_size", f"need 8 <= crop_size <= resize, got {d.crop_size} and "
         f"{d.resize}"),
        (d.workers >= 0, "data.workers", f"must be >= 0, got {d.workers}"),
        *subset_checks(d),
        *run_checks(cfg.run.device, cfg.run.seed),
        *format_checks(cfg.run.weights_format),
    ])
    return cfg


def knn_eval(
    pretrained: str, data: LinearDataConfig, output_dir: Path, *, k: int = 200, temperature: float = 0.07,
    batch_size: int = 256, arch: str | None = None, device_name: str = "auto", extra: dict[str, Any] | None = None,
    seed: int = 0, weights_format: str | None = None, show_progress: bool | str = True,
) -> tuple[Path, dict[str, float]]:
    """kNN top-1/top-5 of ``pretrained``'s pooled features: train/ is the bank (only the subset's images where
    ``data`` names one: data.labels, data.subset), val/ the queries.

    ``extra``: more top-level fields for the record (a sweep's point, for example). ``seed`` draws the "random"
    backbone's weights (the same ones as ``moco eval linear random`` with that seed). ``weights_format``: the method
    of weights whose file does not say (--weights-format). The images are normalised as the weights expect.
    """
    require_writable(output_dir)  # before the features: the record is written at the end
    device = resolve_device(device_name)
    weights = backbone.read(pretrained, weights_format)
    splits = load_splits(data, augment=False, normalisation=backbone.input_normalisation(weights),
                         fits=SMALL_PRESETS["knn"])
    torch.manual_seed(seed)
    model, info = load_backbone(weights, len(splits.classes), arch=arch, crop_size=data.crop_size)
    monitor = KnnMonitor(splits.train, splits.val, len(splits.classes), device=device, workers=data.workers,
                         batch_size=batch_size, k=k, temperature=temperature)
    metrics = monitor(model.to(device), show_progress)  # pooled backbone features: the monitor bypasses fc
    record = output_dir / "result.json"
    subset = {key: getattr(data, key) for key in ("labels", "subset", "subset_seed")} if splits.subset else {}
    record = write_record(record, task="knn", protocol="knn", metrics=metrics, backbone=info,
                          dataset=dataset_record(data.path, splits),
                          config={"k": k, "temperature": temperature, "crop_size": data.crop_size,
                                  "resize": data.resize, "seed": seed, **subset},
                          extra={"topk": effective_k((1, 5), len(splits.classes)), **(extra or {})})
    print(f"knn (k={k}, T={temperature}): " + " ".join(f"{n} {v:.2f}" for n, v in metrics.items()), file=sys.stderr)
    return record, metrics
