"""``moco eval knn``: weighted kNN (k 200, T 0.07) on frozen features, no training; minutes instead of hours."""

from __future__ import annotations

import sys
from pathlib import Path

from torch import nn
from torch.utils.data import DataLoader

from lincls.backbone import load_backbone
from lincls.linear import LinearDataConfig, load_splits
from lincls.records import write_record
from moco_core.knn import extract_features, knn_scores, topk_accuracy
from moco_core.train import resolve_device


def knn_eval(
    pretrained: str, data: LinearDataConfig, output_dir: Path, *, k: int = 200, temperature: float = 0.07,
    batch_size: int = 256, arch: str | None = None, device_name: str = "auto",
) -> tuple[Path, dict[str, float]]:
    """kNN top-1/top-5 of ``pretrained``'s pooled features: train/ is the bank, val/ the queries."""
    device = resolve_device(device_name)
    splits = load_splits(data, augment=False)
    model, info = load_backbone(pretrained, len(splits.classes), arch=arch)
    model.fc = nn.Identity()  # pooled backbone features
    model = model.to(device)
    loaders = [DataLoader(ds, batch_size=batch_size, num_workers=data.workers) for ds in (splits.train, splits.val)]
    (bank, bank_labels), (queries, labels) = (extract_features(model, loader, device) for loader in loaders)
    scores = knn_scores(queries, bank, bank_labels, len(splits.classes), k=k, temperature=temperature)
    metrics = topk_accuracy(scores, labels, (1, min(5, len(splits.classes))))
    record = output_dir / "result.json"
    write_record(record, task="knn", protocol="knn", metrics=metrics, backbone=info,
                 dataset={"path": data.path, "classes": len(splits.classes), "train_images": len(splits.train),
                          "val_images": len(splits.val)},
                 config={"k": k, "temperature": temperature, "crop_size": data.crop_size, "resize": data.resize})
    print(f"knn (k={k}, T={temperature}): " + " ".join(f"{n} {v:.2f}" for n, v in metrics.items()), file=sys.stderr)
    return record, metrics
