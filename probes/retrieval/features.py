"""One global feature an image, as DINO's ``eval_image_retrieval.py`` extracts it: the image (a query cropped to
its box first, where asked) shrunk to ``image_size`` on its longer side with its aspect kept, read by the
backbone's default tap (:func:`moco_core.model.taps.default_tap`: a ViT's class token, a ResNet's pooled last
stage), summed over the scales and L2-normalised. Images go through one at a time: their shapes differ.

ViTs whose position embedding is resampled (``dynamic_img_size``: DINO's, DINOv2's, MAE's) take each image with
its sides rounded to whole patches. A ViT of a fixed grid (MoCo v3's, a random ViT) takes only its trained square.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset

from moco_core.data.image_files import decode_rgb, open_header, reason
from moco_core.model.taps import FeatureTaps, default_tap
from moco_core.model.vit import is_vit
from moco_core.model.weights.formats import Normalisation
from moco_core.run.progress import Progress
from probes.retrieval.data import RetrievalDataError

Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class Shape:
    """How a backbone takes images: ``fixed`` (a fixed-grid ViT's square side, else None) and ``multiple`` (the
    patch size a resampling ViT's sides are rounded to; 1 for a ResNet)."""

    fixed: int | None
    multiple: int

    def fit(self, height: int, width: int) -> tuple[int, int]:
        """The size an image of ``height`` x ``width`` is fed at."""
        if self.fixed is not None:
            return self.fixed, self.fixed
        m = self.multiple
        return max(m, round(height / m) * m), max(m, round(width / m) * m)


def shape_of(backbone: nn.Module) -> Shape:
    if not is_vit(backbone):
        return Shape(None, 1)
    dynamic = bool(getattr(backbone, "dynamic_img_size", False))  # timm's: the position embedding is resampled
    return Shape(None if dynamic else int(backbone.patch_embed.img_size[0]), int(backbone.patch_embed.patch_size[0]))


class _Images(Dataset):
    """(3, H, W) normalised tensors of ``items`` (a path and, for a cropped query, its box)."""

    def __init__(self, items: Sequence[tuple[Path, Box | None]], *, image_size: int, shape: Shape,
                 normalisation: Normalisation) -> None:
        self.items, self.image_size, self.shape = list(items), image_size, shape
        self.mean = torch.tensor(normalisation.mean).view(3, 1, 1)
        self.std = torch.tensor(normalisation.std).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> torch.Tensor:
        path, box = self.items[index]
        try:
            with open_header(path) as header:
                width = header.width
                img = decode_rgb(header)
        except Exception as err:  # any undecodable file: retrieval needs every image, none is substituted
            raise RetrievalDataError(f"{path}: {reason(err)}") from None
        if box is not None:
            img = img.crop(_clipped(box, img.width / width, img.size))
        if self.shape.fixed is None:
            img.thumbnail((self.image_size, self.image_size), Image.Resampling.LANCZOS)  # shrinks, never enlarges
        size = self.shape.fit(img.height, img.width)
        if size != (img.height, img.width):
            img = img.resize((size[1], size[0]), Image.Resampling.BICUBIC)
        pixels = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).view(img.height, img.width, 3)
        return (pixels.permute(2, 0, 1).float() / 255 - self.mean) / self.std


def _clipped(box: Box, scale: float, size: tuple[int, int]) -> tuple[int, int, int, int]:
    """``box`` (in the file's pixels; ``scale``: decoded / file, below 1 where a huge JPEG was decoded smaller)
    rounded to whole pixels as PIL's ``Image.crop(bbx)`` rounds it (DINO's and cirtorch's query crop), kept inside
    the image and at least one pixel wide and high."""
    width, height = size
    x1 = min(max(round(box[0] * scale), 0), width - 1)
    y1 = min(max(round(box[1] * scale), 0), height - 1)
    return x1, y1, max(min(round(box[2] * scale), width), x1 + 1), max(min(round(box[3] * scale), height), y1 + 1)


@torch.inference_mode()
def global_features(backbone: nn.Module, items: Sequence[tuple[Path, Box | None]], *, image_size: int,
                    scales: Sequence[float], normalisation: Normalisation, device: torch.device, workers: int,
                    progress: Progress | None = None, done: int = 0) -> torch.Tensor:
    """(N, D) L2-normalised features of ``items``, in order (float32, on ``device``)."""
    shape = shape_of(backbone)
    taps = FeatureTaps(backbone, (default_tap(backbone),)).eval()
    loader = DataLoader(_Images(items, image_size=image_size, shape=shape, normalisation=normalisation),
                        batch_size=None, num_workers=workers)
    features = []
    for step, image in enumerate(loader, done + 1):
        image = image.to(device)[None]  # (1, 3, H, W)
        total = 0
        for scale in scales:
            scaled = image if scale == 1 else F.interpolate(
                image, size=shape.fit(round(image.shape[2] * scale), round(image.shape[3] * scale)),
                mode="bilinear", align_corners=False)
            total = total + next(iter(taps(scaled).values())).float()  # (1, D)
        features.append(F.normalize(total, dim=1))
        if progress is not None:
            progress.update(step, 0, 1)
    return torch.cat(features)
