"""``moco eval knn``: weighted kNN (k 200, T 0.07) on frozen features, no training; minutes instead of hours."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from lincls.linear import LinearDataConfig, load_splits
from moco_core.backbone import load_backbone
from moco_core.knn import KnnMonitor
from moco_core.records import write_record
from moco_core.rundir import require_writable
from moco_core.runtime import resolve_device
from moco_core.shapes import shapes_version


def knn_eval(
    pretrained: str, data: LinearDataConfig, output_dir: Path, *, k: int = 200, temperature: float = 0.07,
    batch_size: int = 256, arch: str | None = None, device_name: str = "auto", extra: dict[str, Any] | None = None,
    seed: int = 0,
) -> tuple[Path, dict[str, float]]:
    """kNN top-1/top-5 of ``pretrained``'s pooled features: train/ is the bank, val/ the queries.

    ``extra``: more top-level fields for the record (a sweep's point, for example). ``seed`` draws the "random"
    backbone's weights (the same ones as ``moco eval linear random`` with that seed).
    """
    require_writable(output_dir)  # before the features: the record is written at the end
    device = resolve_device(device_name)
    splits = load_splits(data, augment=False)
    torch.manual_seed(seed)
    model, info = load_backbone(pretrained, len(splits.classes), arch=arch)
    monitor = KnnMonitor(splits.train, splits.val, len(splits.classes), device=device, workers=data.workers,
                         batch_size=batch_size, k=k, temperature=temperature)
    metrics = monitor(model.to(device))  # pooled backbone features: the monitor bypasses fc
    record = output_dir / "result.json"
    record = write_record(record, task="knn", protocol="knn", metrics=metrics, backbone=info,
                 dataset={"path": data.path, "classes": len(splits.classes), "train_images": len(splits.train),
                          "val_images": len(splits.val), **shapes_version(data.path)},
                 config={"k": k, "temperature": temperature, "crop_size": data.crop_size, "resize": data.resize,
                         "seed": seed},
                 extra=extra)
    print(f"knn (k={k}, T={temperature}): " + " ".join(f"{n} {v:.2f}" for n, v in metrics.items()), file=sys.stderr)
    return record, metrics
