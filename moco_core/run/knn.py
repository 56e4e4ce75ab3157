"""Weighted k-nearest-neighbour evaluation of frozen features (InstDisc, Wu et al., arXiv 1805.01978).

Each validation image votes with its k most similar training images (cosine similarity of L2-normalised
features), each vote weighted by exp(similarity / T). Defaults k = 200, T = 0.07 as in InstDisc. It gives a
quality signal in minutes, without training anything, so it also serves as a monitor during pretraining.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset

from moco_core.config import ConfigError
from moco_core.model.taps import default_tap
from moco_core.run.features import extract_features


@torch.no_grad()
def knn_scores(
    queries: torch.Tensor, bank: torch.Tensor, bank_labels: torch.Tensor, num_classes: int, *, k: int = 200,
    temperature: float = 0.07, chunk: int = 1024,
) -> torch.Tensor:
    """Class scores (M, num_classes) for normalised ``queries`` (M, D) against a normalised ``bank`` (N, D).

    score[i, c] = sum over the k nearest bank entries j of class c of exp(<q_i, b_j> / T).
    """
    k = min(k, bank.shape[0])
    out = []
    for start in range(0, queries.shape[0], chunk):
        sim = queries[start:start + chunk] @ bank.t()  # (m, N)
        top_sim, top_idx = sim.topk(k, dim=1)  # (m, k)
        weights = (top_sim / temperature).exp()
        scores = torch.zeros(sim.shape[0], num_classes, device=sim.device, dtype=weights.dtype)
        out.append(scores.scatter_add_(1, bank_labels[top_idx], weights))
    return torch.cat(out)


def topk_accuracy(scores: torch.Tensor, labels: torch.Tensor, ks: tuple[int, ...] = (1, 5)) -> dict[str, float]:
    """Top-k accuracies in %, e.g. {'top1': 61.2, 'top5': 84.0}, one key ``top{k}`` for each k of ``ks``, over
    ``scores`` (M, C) and ``labels`` (M,).

    Fewer classes than k (C < k): top-k is top-C, the prediction a hit when its true class is among all C scored,
    so top-5 of a 1- to 5-class problem is 100% for every label the classifier scores (:func:`effective_k` says
    which k was used; the records write it as ``topk``). A label outside [0, C) (a validation class the training
    data had no column for) is never a hit. No image (M = 0) gives NaN."""
    ranked = scores.topk(min(max(ks), scores.shape[1]), dim=1).indices  # (M, min(kmax, C))
    hits = ranked == labels.unsqueeze(1)
    return {f"top{k}": hits[:, :k].any(dim=1).float().mean().item() * 100.0 for k in ks}


def effective_k(ks: tuple[int, ...], num_classes: int) -> dict[str, int]:
    """The k each ``top{k}`` of :func:`topk_accuracy` is computed with over ``num_classes`` classes: min(k, C)."""
    return {f"top{k}": min(k, num_classes) for k in ks}


class KnnMonitor:
    """kNN accuracy of an encoder's pooled features: ``train`` is the bank, ``val`` the queries.

    Each call extracts features (:func:`moco_core.run.features.extract_features`: the encoder's fc or head, the
    projection head or a classifier, never run; BN in eval mode), then gives the encoder back as it was.
    """

    def __init__(self, train: Dataset, val: Dataset, num_classes: int, *, device: torch.device, workers: int,
                 batch_size: int = 256, k: int = 200, temperature: float = 0.07) -> None:
        self.num_classes = num_classes
        self.datasets = {"train images": train, "val images": val}
        self.device, self.workers, self.batch_size = device, workers, batch_size
        self.k, self.temperature = k, temperature

    @classmethod
    def from_root(cls, root: Path, *, crop_size: int, device: torch.device, workers: int) -> KnnMonitor:
        """The pretraining monitor on a labelled train/val root (``test/`` where there is no ``val/``, as CIFAR
        exported to folders has it), with center crops of ``crop_size``."""
        from moco_core.data.augment import build_eval_transform
        from moco_core.data.data import ImageDataset, scan_images, unlabelled_splits, val_split

        transform = build_eval_transform(crop_size)
        splits = [scan_images(root, split=split, workers=max(workers, 1)) for split in ("train", val_split(root))]
        problem = unlabelled_splits(root, *splits)
        if problem:
            raise ConfigError(f"data.knn_path: {problem}")
        train, val = (ImageDataset(s.samples, transform) for s in splits)
        return cls(train, val, len(splits[0].classes), device=device, workers=workers)

    def __call__(self, encoder: nn.Module, show_progress: bool | str = False) -> dict[str, float]:
        """kNN top-1 and top-5 (%); ``show_progress``: a line for the feature extraction (bank, then queries)."""
        tap = default_tap(encoder)  # a ResNet's pooled last stage, a ViT's class token: what fc or head reads
        # fp32 on the device, L2-normalised: the bank stays there for the votes; NaN votes would score at random
        found = extract_features(encoder, self.datasets, taps=(tap,), what="kNN", batch_size=self.batch_size,
                                 device=self.device, workers=self.workers, normalise=True, on_device=True,
                                 progress=show_progress)
        bank, queries = found["train images"], found["val images"]
        scores = knn_scores(queries.features[tap], bank.features[tap], bank.labels, self.num_classes, k=self.k,
                            temperature=self.temperature)
        return topk_accuracy(scores, queries.labels, (1, 5))
