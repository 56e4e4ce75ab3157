"""Patch features of a split, extracted once and cached: a row a patch, with its patch-grid label.

Each picture is resized to ``size`` x ``size`` (bilinear; its aspect is not kept, so that every image gives the
same grid and a batch is one tensor) and normalised as its weights expect, then read at one dense tap
(:class:`moco_core.model.taps.DenseTaps`: a ResNet stage's map, a ViT's patch tokens) in eval mode without
gradients: (h, w) = size / stride patches of C channels each.

Label maps are brought to that grid by **majority**: the label resized to ``size`` x ``size`` by nearest neighbour,
then each patch takes the class covering most of its stride x stride pixels (ignored pixels do not vote; a patch
with none labelled is ignored; ties go to the lower class). Majority rather than nearest (the label at the patch's
centre): a linear probe predicts one class a patch, and the class covering most of it is the one that errs on the
fewest of its pixels; a single sampled pixel is noise at every boundary and misses thin objects that cross it.

The result is a :class:`moco_core.frozen.features.FeatureSet`: ``features[tap]`` (N_images * h * w, C) float32,
and ``labels`` (N_images * h * w, 2) int64: each patch's class (or :data:`dense.data.IGNORE`) and the index of its
image in the split (the held-out images are chosen by it, and validation patches are put back on their image by
it). Cached through :func:`moco_core.frozen.features.cached_features`, keyed by the weights, the view, the split's
file list, the tap and the precision.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dense.data import IGNORE, Split, read_image, read_label
from moco_core.data.data import DatasetError, report_undecodable
from moco_core.data.image_files import reason
from moco_core.model.taps import DenseTaps
from moco_core.run.features import FeatureSet, require_finite
from moco_core.run.runtime import autocast


@dataclass(frozen=True)
class DenseView:
    """The view patch features are computed from (part of their cache key): the whole picture resized to ``size``
    square, bilinear with antialiasing, normalised by ``mean`` / ``std``; labels brought to the grid by majority."""

    size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def record(self) -> dict[str, Any]:
        return {"resize": [self.size, self.size], "interpolation": "bilinear", "antialias": True,
                "mean": list(self.mean), "std": list(self.std), "labels": "majority"}


def patch_labels(label: torch.Tensor, size: int, stride: int, num_classes: int) -> torch.Tensor:
    """(size / stride, size / stride) int64: the majority class of each patch of ``label`` (H, W) resized to
    ``size`` square by nearest neighbour; :data:`IGNORE` where no pixel of the patch is labelled."""
    grid = size // stride
    resized = F.interpolate(label[None, None].float(), size=(size, size), mode="nearest")[0, 0].long()
    blocks = resized.view(grid, stride, grid, stride).permute(0, 2, 1, 3).reshape(grid * grid, stride * stride)
    votes = torch.where(blocks == IGNORE, num_classes, blocks)  # ignored pixels vote for a class past the last
    counts = torch.zeros(grid * grid, num_classes + 1, dtype=torch.long).scatter_add_(1, votes, torch.ones_like(votes))
    best = counts[:, :num_classes].argmax(1)  # the first of the largest: ties go to the lower class
    return torch.where(counts[:, :num_classes].sum(1) > 0, best, IGNORE).view(grid, grid)


def _pixels(image: Any, size: int, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """(3, size, size) normalised: the picture resized bilinearly (aspect not kept)."""
    x = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1).float() / 255
    x = F.interpolate(x[None], size=(size, size), mode="bilinear", align_corners=False, antialias=True)[0]
    return (x - mean) / std


def _read(split: Split, index: int, num_classes: int) -> tuple[Any, torch.Tensor] | None:
    """The pair ``index``, or None (warned of once, listed in ``split.unreadable``) when it fails to decode."""
    sample = split.samples[index]
    path = sample.image
    try:
        image = read_image(path)
        path = sample.label
        return image, read_label(path, num_classes)
    except DatasetError:
        raise
    except Exception as err:  # a file cut short after its header fails to decode in many ways
        why = reason(err)
        report_undecodable(str(path), "nothing (the pair is left out)", why)
        split.unreadable.append(f"{path.name} ({why})")
        return None


@torch.no_grad()
def extract_patches(backbone: nn.Module, split: Split, *, tap: str, view: DenseView, num_classes: int,
                    batch_size: int, device: torch.device, amp: bool = True, progress: bool = False) -> FeatureSet:
    """Every readable pair of ``split`` through ``backbone`` once at ``tap`` (see the module docstring)."""
    reader = DenseTaps(backbone.to(device).eval(), (tap,))
    stride = reader.stride[tap]
    size = view.size  # a multiple of the stride (checked with the config)
    m, s = torch.tensor(view.mean).view(3, 1, 1), torch.tensor(view.std).view(3, 1, 1)
    features: list[torch.Tensor] = []
    labels: list[torch.Tensor] = []
    started = time.perf_counter()
    for first in range(0, len(split.samples), batch_size):
        pixels, grids, owners = [], [], []
        for index in range(first, min(first + batch_size, len(split.samples))):
            pair = _read(split, index, num_classes)
            if pair is not None:
                pixels.append(_pixels(pair[0], size, m, s))
                grids.append(patch_labels(pair[1], size, stride, num_classes).reshape(-1))
                owners.append(torch.full_like(grids[-1], index))
        if not pixels:
            continue
        with autocast(device, amp):
            maps = reader(torch.stack(pixels).to(device))[tap]  # (B, C, h, w)
        features.append(maps.float().permute(0, 2, 3, 1).reshape(-1, maps.shape[1]).cpu())  # (B * h * w, C)
        labels.append(torch.stack([torch.cat(grids), torch.cat(owners)], 1))
    if not features:
        raise DatasetError(f"{split.name} set: none of its {len(split.samples)} pairs could be decoded")
    out = FeatureSet({tap: torch.cat(features)}, torch.cat(labels), seconds=time.perf_counter() - started)
    require_finite(out.features, f"{split.name} patch features")
    if progress:
        print(f"{split.name}: {len(split.samples)} images, {len(out)} patches in {out.seconds:.1f} s",
              file=sys.stderr, flush=True)
    return out
