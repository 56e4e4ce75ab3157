"""The one feature pass: a frozen backbone read at its taps over datasets, for every evaluation that reads
features (DINOv2's ``eval/utils.py`` ``extract_features`` idea, arXiv 2304.07193).

:func:`extract_features` serves the kNN monitor and ``moco eval knn`` (:mod:`moco_core.run.knn`), the cached
linear mode, few-shot and the transfer suite (whose keyed disk cache is ``moco_core/frozen/features.py``):
each dataset through the backbone once, in eval mode, without gradients, read at every tap asked for in that one
pass (:class:`moco_core.model.taps.FeatureTaps`; the classifier, ``fc`` or ``head``, is never run). Features that
are not finite are one error (:func:`require_finite`), never a score at chance.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from moco_core.errors import UserError
from moco_core.model.taps import FeatureTaps
from moco_core.run.progress import Progress, format_duration
from moco_core.run.runtime import autocast


def non_finite_error(what: str, names: Sequence[str]) -> UserError:
    """The one line for features (of ``names``: taps, splits) that are not finite. Finite weights can give them
    (activations past float32's range, broken BN statistics), and a NaN scores at chance without a word."""
    return UserError(f"{what}: the backbone's features ({', '.join(names)}) are not finite (NaN or inf): its weights "
                     f"or BN statistics are broken, or its activations overflow float32; nothing can be evaluated "
                     f"from them")


def require_finite(features: Mapping[str, torch.Tensor], what: str) -> None:
    """:func:`non_finite_error` for the entries of ``features`` that hold a NaN or an inf (one sync each)."""
    broken = [name for name, value in features.items() if not torch.isfinite(value).all()]
    if broken:
        raise non_finite_error(what, broken)


@dataclass
class FeatureSet:
    """Features of one dataset split: ``features`` {tap: (N, D) float32}, ``labels`` (N,) int64 class indices,
    or (N, C) for multi-label data (VOC07: 1 present, 0 absent, -1 difficult), in the dataset's order."""

    features: dict[str, torch.Tensor]
    labels: torch.Tensor
    key: dict[str, Any] | None = None  # what made them (the frozen protocols' disk cache), None when not cached
    seconds: float = 0.0  # extraction time (0 when read from the cache)
    cached: bool = False  # read from the cache file
    path: Path | None = None  # the cache file

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def subset(self, index: torch.Tensor | Sequence[int]) -> FeatureSet:
        """The rows ``index`` (a few-shot draw, a held-out part of train), features and labels alike."""
        index = torch.as_tensor(index, dtype=torch.long)
        return FeatureSet({t: f[index] for t, f in self.features.items()}, self.labels[index], self.key)


def _labels(target: Any) -> torch.Tensor:
    return target if isinstance(target, torch.Tensor) else torch.as_tensor(target)


def _where(what: str, split: str, splits: int) -> str:
    """The start of a line about one dataset of the pass: ``what``, and the dataset's name where there are several."""
    return f"{what}: {split}: " if splits > 1 else f"{what}: "


def _named(split: str, tap: str, splits: int, taps: int) -> str:
    """How a message names one split's tap: by what tells it apart from the rest of the pass."""
    return " ".join(([split] if splits > 1 else []) + ([tap] if splits == 1 or taps > 1 else []))


@torch.no_grad()
def extract_features(backbone: nn.Module, datasets: Mapping[str, Dataset], *, taps: Sequence[str], what: str,
                     batch_size: int = 256, device: torch.device | str = "cpu", workers: int = 0, amp: bool = False,
                     normalise: bool = False, on_device: bool = False, progress: bool | str = False,
                     timed: bool = False) -> dict[str, FeatureSet]:
    """Every item of each dataset (``(image (3, H, W), target, ...)``) through ``backbone`` once, read at ``taps``:
    {name: :class:`FeatureSet`}, each float32 on the CPU (``on_device``: left on ``device``, as kNN's bank).

    The backbone is moved to ``device`` and put in eval mode (BN statistics and dropout frozen: the features of a
    frozen network), then given back in the mode it had; ``amp``: bf16 autocast on CUDA (fp32 on CPU);
    ``normalise``: each feature L2-normalised (kNN's cosine similarity). ``progress``: a line over all the batches
    (``Progress``'s ``enabled``); ``timed``: a line a dataset saying its images and pace. An empty dataset, or
    features that are not finite, are one error starting ``what``, naming the datasets (or the taps, for one)."""
    device = torch.device(device)
    was_training = backbone.training
    reader = FeatureTaps(backbone.to(device).eval(), tuple(taps))
    loaders = {name: DataLoader(data, batch_size=batch_size, num_workers=workers, pin_memory=device.type == "cuda")
               for name, data in datasets.items()}
    shown = Progress(sum(len(loader) for loader in loaders.values()), label="features", enabled=progress)
    keep = device if on_device else torch.device("cpu")
    found, step = {}, 0
    try:
        for name, loader in loaders.items():
            out: dict[str, list[torch.Tensor]] = {tap: [] for tap in reader.taps}
            labels: list[torch.Tensor] = []
            started = time.perf_counter()
            for images, target, *_ in loader:
                with autocast(device, amp):
                    feats = reader(images.to(device, non_blocking=True))
                for tap, value in feats.items():
                    value = F.normalize(value.float(), dim=1) if normalise else value.float()
                    out[tap].append(value.to(keep))
                labels.append(_labels(target).to(keep))
                step += 1
                shown.update(step, 0, 1)
            if not labels:
                raise UserError(f"{_where(what, name, len(loaders))}the dataset is empty; no features to compute")
            found[name] = FeatureSet({tap: torch.cat(parts) for tap, parts in out.items()}, torch.cat(labels),
                                     seconds=time.perf_counter() - started)
    finally:
        backbone.train(was_training)
        shown.clear()
    require_finite({_named(name, tap, len(found), len(reader.taps)): value for name, got in found.items()
                    for tap, value in got.features.items()}, what)
    if timed:
        for name, got in found.items():
            print(f"{_where(what, name, len(found))}{len(got)} images in {format_duration(got.seconds)} "
                  f"({len(got) / max(got.seconds, 1e-9):.0f} images/s)", file=sys.stderr, flush=True)
    return found
