"""A split's images as a torch dataset of ``(view (3, H, W), label, index)``: image files through
:class:`moco_core.data.data.ImageDataset` (checked first as the classification pipeline checks them: a file that
does not open is skipped, and counted in one warning), CIFAR's rows through :class:`ArrayImages`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from classification.linear_transfer.readers import Split
from moco_core.data.data import ImageDataset, verify_samples, warn_skipped
from moco_core.errors import print_warning


class ArrayImages(Dataset):
    """Images held as arrays (N, H, W, 3) uint8 (CIFAR's batches), as PIL images through ``transform``."""

    def __init__(self, arrays: np.ndarray, labels: list[Any], transform: Callable[[Image.Image], Any]) -> None:
        self.arrays, self.labels, self.transform = arrays, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Any, Any, int]:
        return self.transform(Image.fromarray(self.arrays[index], "RGB")), self.labels[index], index


def _label(value: Any) -> Any:
    return torch.tensor(value) if isinstance(value, (tuple, list)) else value  # multi-label rows collate as (B, K)


def readable(split: Split, *, workers: int, what: str) -> Split:
    """``split`` less the files that do not open (one warning line counting them); arrays are kept whole."""
    if split.arrays is not None:
        return split
    kept, skipped = verify_samples(split.samples, max(workers, 1))
    note = warn_skipped(skipped)
    if note:
        print_warning(f"{what}: {note}")
    if len(kept) == len(split.samples):
        return split
    keep = {path for path, _ in kept}
    return split.take([i for i, (path, _) in enumerate(split.samples) if path in keep])


def as_dataset(split: Split, transform: Callable[[Image.Image], Any]) -> Dataset:
    labels = [_label(label) for _, label in split.samples]
    if split.arrays is not None:
        return ArrayImages(split.arrays, labels, transform)
    return ImageDataset([(path, label) for (path, _), label in zip(split.samples, labels, strict=True)], transform)


def label_tensor(split: Split) -> torch.Tensor:
    """(N,) class indices, or (N, K) 1 / 0 / -1 for multi-label samples."""
    return torch.tensor([label for _, label in split.samples], dtype=torch.long)
