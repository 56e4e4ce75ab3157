"""Semantic segmentation scores from a confusion matrix: mean IoU and pixel accuracy, for every segmentation
evaluation (``moco eval semseg``, the dense probes' ``moco eval linseg``).

No maintained package scores VOC's semantic segmentation (its devkit is MATLAB), so the confusion matrix and the
scores are computed here, as detectron2's ``SemSegEvaluator`` and cityscapesScripts' ``evalPixelLevelSemanticLabeling``
do: ``matrix[g, p]`` counts the pixels of ground-truth class ``g`` predicted as ``p``; pixels labelled
``ignore_index`` (or any value outside the classes) are left out. The IoU of class c is TP / (TP + FP + FN); a class
that is neither in the ground truth nor predicted (TP + FP + FN = 0) has no IoU and is left out of the mean, as
cityscapesScripts' ``getIouScoreForLabel`` returns NaN for it and its average skips NaN. The suite checks the
result against cityscapesScripts' evaluator where it is installed (the ``cityscapes`` extra).
"""

from __future__ import annotations

import math

import numpy as np
import torch


def confusion_matrix(labels: torch.Tensor, predictions: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(K, K) int64 counts of (ground truth, prediction) pairs over the pixels whose label is in [0, K)."""
    labels, predictions = labels.reshape(-1).long(), predictions.reshape(-1).long()
    keep = (labels >= 0) & (labels < num_classes)  # drops ignore_index (255) and any other void value
    pairs = labels[keep] * num_classes + predictions[keep].clamp(0, num_classes - 1)
    return torch.bincount(pairs, minlength=num_classes**2).reshape(num_classes, num_classes)


def scores(matrix: np.ndarray | torch.Tensor, class_names: list[str] | tuple[str, ...]) -> dict[str, object]:
    """mIoU, pixel accuracy and mean class accuracy (percent) and the per-class IoU of a (K, K) confusion matrix.

    ``per_class_IoU`` holds None for a class without IoU (absent from the ground truth and the predictions).
    """
    m = np.asarray(matrix, dtype=np.float64)
    tp = np.diag(m)
    gt, predicted = m.sum(axis=1), m.sum(axis=0)  # (K,) pixels of each class in the labels, in the predictions
    union = gt + predicted - tp
    iou = np.divide(tp, union, out=np.full_like(tp, np.nan), where=union > 0)
    accuracy = np.divide(tp, gt, out=np.full_like(tp, np.nan), where=gt > 0)
    total = m.sum()
    return {
        "mIoU": 100 * float(np.nanmean(iou)) if np.isfinite(iou).any() else math.nan,
        "pixel_acc": 100 * float(tp.sum() / total) if total else math.nan,
        "mean_acc": 100 * float(np.nanmean(accuracy)) if np.isfinite(accuracy).any() else math.nan,
        "per_class_IoU": {name: None if math.isnan(v) else 100 * float(v) for name, v in zip(class_names, iou,
                                                                                            strict=True)},
    }
