"""The tensor augmentation computed one image at a time: the reference the batched pipeline must equal.

:func:`moco_core.data.tensor_augment.apply_params` augments a whole batch in batched kernels (one ``roi_align`` per
bucket of similar image sizes, one colour blend per jitter position, each flagged op on its samples gathered
together, one grouped blur convolution per direction). This module applies the same
:class:`~moco_core.data.tensor_augment.AugmentParams` image by image, with no batching logic at all: each crop is
``roi_align`` on that image alone, each enabled jitter op runs in that image's own order with its own factor, and
the flags are plain ``if``s. The per-image pixel ops are the product's own (``tensor_augment.JITTER_OPS``,
``gaussian_blur``, ``solarize``, ``normalize``), which ``test_tensor_augment.py`` checks against torchvision and
PIL on fixed parameters; what this reference checks is everything the batching adds: masks, per-sample factors
and orders, buckets and the order of the views.

Used by ``test_batched_augment.py`` and by ``benchmarks/batched_augment.py`` (the per-image row).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torchvision.ops

from moco_core.data import tensor_augment as ta
from moco_core.pretrain_config import AugmentConfig


def crop_one(image: torch.Tensor, box: Sequence[int], size: int) -> torch.Tensor:
    """One uint8 ``(3, H, W)`` image's crop ``(top, left, height, width)`` resized to ``(1, 3, size, size)``:
    ``roi_align`` on that image alone (aligned boxes, adaptive sampling), rounded to uint8 levels, in [0, 1]."""
    top, left, height, width = (float(v) for v in box)
    roi = torch.tensor([[0.0, left, top, left + width, top + height]])
    out = torchvision.ops.roi_align(image[None].float(), roi, size, 1.0, 0, aligned=True)
    return out.round() / 255.0


def jitter_one(x: torch.Tensor, params: ta.AugmentParams, i: int, cfg: AugmentConfig) -> torch.Tensor:
    """Sample ``i``'s colour jitter: its enabled ops, one after the other in its own order, with its factors."""
    if not bool(params.jitter[i]):
        return x
    enabled = ta.enabled_jitter_ops(cfg)
    for op in params.jitter_order[i].tolist():
        if op in enabled:
            x = ta.JITTER_OPS[op](x, float(params.jitter_factors[i, op]))
    return x


def grayscale_one(x: torch.Tensor, params: ta.AugmentParams, i: int) -> torch.Tensor:
    """Sample ``i``'s random grayscale (three equal channels)."""
    return ta.rgb_to_grayscale(x, num_output_channels=3).clone() if bool(params.grayscale[i]) else x


def view_one(image: torch.Tensor, params: ta.AugmentParams, i: int, cfg: AugmentConfig) -> torch.Tensor:
    """One view of one image, ``(1, 3, S, S)`` in [0, 1] before normalisation, in ``apply_params``'s order."""
    x = crop_one(image, params.boxes[i].tolist(), cfg.crop_size)
    if cfg.grayscale_before_jitter:
        x = jitter_one(grayscale_one(x, params, i), params, i, cfg)
    else:
        x = grayscale_one(jitter_one(x, params, i, cfg), params, i)
    if bool(params.blur[i]):
        x = ta.gaussian_blur(x, params.blur_sigma[i:i + 1])
    if params.solarize is not None and bool(params.solarize[i]):
        x = ta.solarize(x)
    if bool(params.flip[i]):
        x = x.flip(-1)
    return x


def per_image_views(images: Sequence[torch.Tensor], params: ta.AugmentParams, cfg: AugmentConfig) -> torch.Tensor:
    """``apply_params(images, params, cfg)`` computed image by image: normalised float32 ``(N, 3, S, S)``."""
    views = [view_one(image, params, i, cfg) for i, image in enumerate(images)]
    if not views:
        return torch.empty((0, 3, cfg.crop_size, cfg.crop_size))
    return ta.normalize(torch.cat(views), cfg.mean, cfg.std)


def per_image_two_crops(images: Sequence[torch.Tensor], cfg: AugmentConfig,
                        generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``TensorTwoCrops(cfg)(images, generator)`` image by image: the query view's parameters are drawn first,
    then the key view's (view 1: MoCo v3's second-view blur and solarize probabilities)."""
    sizes = ta.image_sizes(images)
    query = ta.sample_params(len(images), sizes, cfg, generator, view=0)
    key = ta.sample_params(len(images), sizes, cfg, generator, view=1)
    return per_image_views(images, query, cfg), per_image_views(images, key, cfg)
