"""Image augmentations for MoCo pretraining (two random crops of one image) and for evaluation.

Every random choice is drawn from torch's global RNG, so ``torch.manual_seed`` makes the pipeline
reproducible (DataLoader workers receive distinct torch seeds automatically).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from PIL import Image, ImageFilter, ImageOps
from torchvision import transforms as T

from moco_core.pretrain_config import AugmentConfig

IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)


class RandomGaussianBlur:
    """Gaussian blur with sigma drawn uniformly from ``sigma`` (MoCo v2; the PIL radius is the sigma).

    It always blurs: wrap it in ``RandomApply`` to blur with a probability.
    """

    def __init__(self, sigma: Sequence[float] = (0.1, 2.0)) -> None:
        lo, hi = (float(s) for s in sigma)
        if not 0.0 <= lo <= hi:
            raise ValueError(f"blur sigma range must satisfy 0 <= lo <= hi, got ({lo}, {hi})")
        self.sigma = (lo, hi)

    def sample_sigma(self) -> float:
        """Draw one sigma uniformly in ``[lo, hi]`` from torch's RNG."""
        lo, hi = self.sigma
        return float(torch.empty(1).uniform_(lo, hi).item())

    def __call__(self, img: Image.Image) -> Image.Image:
        return img.filter(ImageFilter.GaussianBlur(radius=self.sample_sigma()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(sigma={self.sigma})"


class Solarize:
    """PIL's solarize: every channel value at or above 128 becomes 255 minus itself (BYOL, arXiv 2006.07733; MoCo
    v3's second view). It always solarizes: wrap it in ``RandomApply`` to solarize with a probability."""

    threshold = 128

    def __call__(self, img: Image.Image) -> Image.Image:
        return ImageOps.solarize(img, threshold=self.threshold)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(threshold={self.threshold})"


def view_probs(cfg: AugmentConfig, view: int) -> tuple[float, float]:
    """(blur, solarize) probabilities of view 0 or 1: the ``*_view2`` fields apply to view 1 where set (MoCo v3's
    asymmetric views), else both views take the first's."""
    if view not in (0, 1):
        raise ValueError(f"view must be 0 or 1, got {view}")
    blur, solarize = cfg.blur_prob, cfg.solarize_prob
    if view == 1:
        blur = blur if cfg.blur_prob_view2 is None else cfg.blur_prob_view2
        solarize = solarize if cfg.solarize_prob_view2 is None else cfg.solarize_prob_view2
    return blur, solarize


def _color_transforms(cfg: AugmentConfig) -> list[Callable[[Image.Image], Image.Image]]:
    """Colour jitter and random grayscale in the order the config asks for (v1 or v2)."""
    jitter: list[Callable[[Image.Image], Image.Image]] = []
    if cfg.color_jitter_prob > 0:
        color_jitter = T.ColorJitter(*cfg.color_jitter)
        if cfg.color_jitter_prob >= 1.0:
            jitter.append(color_jitter)
        else:
            jitter.append(T.RandomApply([color_jitter], p=cfg.color_jitter_prob))
    gray: list[Callable[[Image.Image], Image.Image]] = []
    if cfg.grayscale_prob > 0:
        gray.append(T.RandomGrayscale(p=cfg.grayscale_prob))
    return gray + jitter if cfg.grayscale_before_jitter else jitter + gray


def build_pretrain_transform(cfg: AugmentConfig, view: int = 0) -> Callable[[Image.Image], torch.Tensor]:
    """One random view (``view`` 0 or 1: see :func:`view_probs`): crop, colour (v1 or v2 order), optional blur,
    optional solarize (v3), flip, tensor, normalise.

    Steps whose probability is 0 are left out, so they draw nothing from the RNG.
    """
    blur_prob, solarize_prob = view_probs(cfg, view)
    steps: list[Callable] = [T.RandomResizedCrop(cfg.crop_size, scale=tuple(cfg.crop_scale))]
    steps += _color_transforms(cfg)
    if blur_prob > 0:
        steps.append(T.RandomApply([RandomGaussianBlur(cfg.blur_sigma)], p=blur_prob))
    if solarize_prob > 0:
        steps.append(T.RandomApply([Solarize()], p=solarize_prob))
    if cfg.flip_prob > 0:
        steps.append(T.RandomHorizontalFlip(p=cfg.flip_prob))
    steps += [T.ToTensor(), T.Normalize(mean=list(cfg.mean), std=list(cfg.std))]
    return T.Compose(steps)


class TwoCrops:
    """Two random views of the same image: ``transform`` twice (the query and key views of v1/v2), or
    ``transform`` then ``second`` (MoCo v3's asymmetric views)."""

    def __init__(self, transform: Callable[[Image.Image], torch.Tensor],
                 second: Callable[[Image.Image], torch.Tensor] | None = None) -> None:
        self.transform = transform
        self.second = transform if second is None else second

    def __call__(self, img: Image.Image) -> tuple[torch.Tensor, torch.Tensor]:
        query = self.transform(img)
        key = self.second(img)
        return query, key

    def __repr__(self) -> str:
        second = "" if self.second is self.transform else f", {self.second!r}"
        return f"{type(self).__name__}({self.transform!r}{second})"


def build_two_crops(cfg: AugmentConfig) -> TwoCrops:
    """The two views of a contrastive method: view 0 and view 1 of :func:`build_pretrain_transform` (the same
    transform for v1/v2, whose configs set no second-view probability)."""
    return TwoCrops(build_pretrain_transform(cfg, 0), build_pretrain_transform(cfg, 1))


def eval_resize(crop_size: int) -> int:
    """The short side an evaluation view is resized to before its centre crop: 256 for 224, as ImageNet's."""
    return round(crop_size * 256 / 224)


def build_eval_transform(
    crop_size: int,
    resize: int | None = None,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
) -> Callable[[Image.Image], torch.Tensor]:
    """Deterministic evaluation view: resize the short side, centre crop, tensor, normalise.

    ``resize`` defaults to ``eval_resize(crop_size)`` (256 for a 224 crop, as the paper's protocol).
    """
    short_side = resize if resize is not None else eval_resize(crop_size)
    return T.Compose(
        [
            T.Resize(short_side),
            T.CenterCrop(crop_size),
            T.ToTensor(),
            T.Normalize(mean=list(mean), std=list(std)),
        ]
    )


def build_supervised_transform(cfg: AugmentConfig) -> Callable[[Image.Image], torch.Tensor]:
    """The standard supervised view (torchvision's ImageNet recipe): RandomResizedCrop (scale 0.08-1), flip."""
    return T.Compose([
        T.RandomResizedCrop(cfg.crop_size),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(cfg.mean, cfg.std),
    ])
