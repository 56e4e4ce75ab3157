"""Semantic segmentation scores from the confusion matrix: mIoU and pixel accuracy, as mmsegmentation,
detectron2's ``SemSegEvaluator`` and cityscapesScripts compute them.

The matrix ``M`` (K, K) counts pixels, ``M[t, p]``: ground truth t, predicted p, over every pixel whose label is
not ``ignore_index`` (ADE20K's "other" 0, shifted to 255; VOC's border 255). Per class, IoU = M[c, c] / (row c +
column c - M[c, c]); mIoU is their mean over the classes that occur in the ground truth or the predictions (a class
with an empty union has no IoU, and is left out of the mean rather than counted as 0 or 1). Pixel accuracy is
trace(M) / sum(M)."""

from __future__ import annotations

import math

import torch


def confusion_matrix(prediction: torch.Tensor, target: torch.Tensor, num_classes: int,
                     ignore_index: int = 255) -> torch.Tensor:
    """(K, K) int64 pixel counts, rows the ground truth: ``prediction`` and ``target`` are label maps of one shape
    (any), int; pixels whose target is ``ignore_index`` are not counted. A target value that is neither a class
    nor ``ignore_index`` is a ValueError (the readers refuse such files first)."""
    if prediction.shape != target.shape:
        raise ValueError(f"prediction {tuple(prediction.shape)} and target {tuple(target.shape)} differ in shape")
    keep = target != ignore_index
    t, p = target[keep].long(), prediction[keep].long()
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= num_classes):
        raise ValueError(f"target values must be classes 0-{num_classes - 1} or {ignore_index}")
    return torch.bincount(t * num_classes + p, minlength=num_classes * num_classes).view(num_classes, num_classes)


def scores(matrix: torch.Tensor) -> dict[str, float | list[float | None]]:
    """``miou`` and ``pixel_accuracy`` in percent, and ``iou``: each class's IoU in percent (None: the class is in
    neither the ground truth nor the predictions), from a (K, K) confusion matrix."""
    m = matrix.double()
    hits = m.diagonal()
    union = m.sum(0) + m.sum(1) - hits
    iou = [float(100 * h / u) if u > 0 else None for h, u in zip(hits.tolist(), union.tolist(), strict=True)]
    present = [v for v in iou if v is not None]
    total = float(m.sum())
    return {"miou": sum(present) / len(present) if present else math.nan,
            "pixel_accuracy": 100 * float(hits.sum()) / total if total else math.nan, "iou": iou}
