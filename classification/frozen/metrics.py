"""The transfer datasets' metrics, in %, from decision values: top-1 accuracy, mean per-class accuracy, and PASCAL
VOC 2007's 11-point mean average precision.

- :func:`top1`: the share of images whose highest score is their class (Food-101, CIFAR, SUN397, Cars, DTD, CUB).
- :func:`mean_per_class`: each class's top-1 accuracy over its own test images, averaged over the classes that
  have test images (Aircraft, Pets, Caltech-101, Flowers: Kornblith et al., arXiv 1805.08974, Table 1), so a
  large class weighs no more than a small one.
- :func:`map11`: per class, the precision/recall curve of the images ranked by score, its average precision
  taken at the 11 recalls 0, 0.1, ..., 1 (the largest precision at a recall at least that large; 0 where none
  reaches it) as the VOC 2007 devkit's ``VOCevalcls`` does; images marked difficult for the class (label -1)
  are left out of its ranking; classes without a positive test image are left out of the mean.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

METRICS = ("top1", "mean_per_class", "map11")


def top1(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """scores (N, K), labels (N,) class indices."""
    return float((scores.argmax(1) == labels.to(scores.device)).double().mean() * 100.0)


def mean_per_class(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """scores (N, K), labels (N,): the mean over the classes present in ``labels`` of their accuracy."""
    labels = labels.to(scores.device)
    hits = (scores.argmax(1) == labels).double()
    k = scores.shape[1]
    count = torch.zeros(k, dtype=torch.float64, device=scores.device).index_add_(0, labels, torch.ones_like(hits))
    right = torch.zeros(k, dtype=torch.float64, device=scores.device).index_add_(0, labels, hits)
    present = count > 0
    return float((right[present] / count[present]).mean() * 100.0)


def average_precision_11(scores: torch.Tensor, labels: torch.Tensor) -> float | None:
    """One class: scores (N,), labels (N,) 1 positive, 0 negative, -1 difficult (left out). AP in [0, 1], or None
    without a positive."""
    keep = labels >= 0
    scores, positive = scores[keep].double(), (labels[keep] > 0).double()
    total = float(positive.sum())
    if total == 0:
        return None
    order = torch.argsort(scores, descending=True, stable=True)
    tp = positive[order].cumsum(0)
    fp = (1.0 - positive[order]).cumsum(0)
    recall, precision = tp / total, tp / (tp + fp)
    ap = 0.0
    for t in torch.linspace(0, 1, 11, dtype=torch.float64):
        reached = recall >= t - 1e-12  # recall k/n against t = 0.1 j: no rounding may push it below
        ap += float(precision[reached].max()) if reached.any() else 0.0
    return ap / 11.0


def map11(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """scores (N, K), labels (N, K) 1 / 0 / -1: the mean over classes (with a positive) of the 11-point AP, in %."""
    aps = [average_precision_11(scores[:, c], labels[:, c]) for c in range(scores.shape[1])]
    kept = [ap for ap in aps if ap is not None]
    if not kept:
        raise ValueError("no class has a positive image: the mAP is undefined")
    return sum(kept) / len(kept) * 100.0


def metric(name: str) -> Callable[[torch.Tensor, torch.Tensor], float]:
    """The function of a metric's name (:data:`METRICS`)."""
    return {"top1": top1, "mean_per_class": mean_per_class, "map11": map11}[name]


def per_image_correct(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(N,) 1.0 where the top score is the label: what the significance test permutes."""
    return (scores.argmax(1) == labels.to(scores.device)).double()
