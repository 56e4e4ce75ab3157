"""The batched tensor augmentation equals the same augmentation computed image by image (same seeds, same views).

``moco_core.data.tensor_augment`` augments a batch in batched kernels (about 310 pixel ops for the two crops of 64
images, against 7,000-8,000 image by image: ``benchmarks/batched_augment.py``); ``per_image_augment`` applies the
same parameters one image at a time (see its docstring). Every transform on its own, then the whole recipes of
the shipped presets (MoCo v1, v2, and v3's asymmetric views), on small images of mixed sizes.

Tolerance: ``ATOL`` on the normalised views (4.5e-6 in [0, 1] units before dividing by ``std``, a nine-hundredth
of a uint8 level; the largest difference seen is 6.3e-6 here over 10 seeds of each recipe, 8.3e-6 at 224 px).
The crops are bit for bit those of ``roi_align`` on each image alone; what differs is float rounding only: a
blend written as one ``addcmul`` where the per-image op multiplies and adds, a contrast mean reduced over a batch
instead of one image, the blur's zero taps up to the batch's largest radius. One op turns that rounding into a
visible step: solarize inverts at 128/255, so a value within float rounding of the threshold may be inverted in
one path only (a jump of 1/255 before normalisation; 1 of 19.3 million values in the v3 recipe's two crops of 64
images at 224 px): the v3 test allows a few such values (``_assert_same_views``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import torch

from moco_core.config import load_config
from moco_core.data import tensor_augment as ta
from moco_core.pretrain_config import AugmentConfig, PretrainConfig
from tests.moco_core.data.per_image_augment import per_image_two_crops, per_image_views

ATOL = 2e-5
SOLARIZE_STEP = 1.01 / 255 / min(AugmentConfig().std)  # a value inverted at the threshold in one path only
SIZES = [(40, 56), (64, 48), (33, 33), (48, 64), (17, 23), (40, 56), (64, 64), (30, 120)]  # mixed: several buckets
NOTHING = AugmentConfig(crop_size=32, color_jitter_prob=0.0, grayscale_prob=0.0, flip_prob=0.0)


@pytest.fixture(autouse=True)
def _one_intra_op_thread() -> Iterator[None]:
    """Many small ops: one thread is faster on a shared CPU (as in test_tensor_augment.py)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _images(sizes: list[tuple[int, int]] = SIZES, seed: int = 0) -> list[torch.Tensor]:
    """Smooth random uint8 images (a coarse grid upsampled): like photographs, the crops interpolate real slopes."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for h, w in sizes:
        coarse = torch.rand(1, 3, h // 6 + 2, w // 6 + 2, generator=g) * 255
        fine = torch.nn.functional.interpolate(coarse, size=(h, w), mode="bicubic", align_corners=False)
        out.append(fine[0].round().clamp(0, 255).to(torch.uint8))
    return out


def _assert_same_views(ours: torch.Tensor, reference: torch.Tensor, *, solarize_steps: int = 0) -> None:
    """Equal within ``ATOL``, but for at most ``solarize_steps`` values that solarize inverted in one path only."""
    diff = (ours - reference).abs()
    beyond = diff > ATOL
    assert int(beyond.sum()) <= solarize_steps, f"{int(beyond.sum())} values differ, max {float(diff.max())}"
    assert bool((diff[beyond] <= SOLARIZE_STEP).all()), float(diff.max())


def _preset(name: str) -> AugmentConfig:
    """A shipped preset's augmentation at 32 px."""
    return dataclasses.replace(load_config(PretrainConfig, name, check=False).augment, crop_size=32)


# Each transform alone (everything else off), its probability 0.5 so that the batch mixes samples with and without
# it; the flag that must be mixed is named.
ALONE: list[tuple[str, AugmentConfig, str | None]] = [
    ("crop", NOTHING, None),
    ("crop, scale 0.08-1, 24 px", dataclasses.replace(NOTHING, crop_size=24, crop_scale=(0.08, 1.0)), None),
    ("brightness", dataclasses.replace(NOTHING, color_jitter=(0.4, 0, 0, 0), color_jitter_prob=0.5), "jitter"),
    ("contrast", dataclasses.replace(NOTHING, color_jitter=(0, 0.4, 0, 0), color_jitter_prob=0.5), "jitter"),
    ("saturation", dataclasses.replace(NOTHING, color_jitter=(0, 0, 0.4, 0), color_jitter_prob=0.5), "jitter"),
    ("hue", dataclasses.replace(NOTHING, color_jitter=(0, 0, 0, 0.4), color_jitter_prob=0.5), "jitter"),
    ("jitter, 4 ops in random orders", dataclasses.replace(NOTHING, color_jitter_prob=0.5), "jitter"),
    ("grayscale", dataclasses.replace(NOTHING, grayscale_prob=0.5), "grayscale"),
    ("blur", dataclasses.replace(NOTHING, blur_prob=0.5), "blur"),
    ("solarize", dataclasses.replace(NOTHING, solarize_prob=0.5), "solarize"),
    ("flip", dataclasses.replace(NOTHING, flip_prob=0.5), "flip"),
]


@pytest.mark.parametrize(("name", "cfg", "flag"), ALONE, ids=[row[0] for row in ALONE])
def test_each_transform_alone_equals_the_per_image_reference(name: str, cfg: AugmentConfig, flag: str | None) -> None:
    images = _images()
    for seed in range(3):
        params = ta.sample_params(len(images), ta.image_sizes(images), cfg, torch.Generator().manual_seed(seed))
        if flag is not None:
            drawn = getattr(params, flag)
            assert drawn.any() and not drawn.all(), (name, seed)  # the batch mixes both cases
        batched = ta.apply_params(images, params, cfg)
        _assert_same_views(batched, per_image_views(images, params, cfg))


def test_an_image_listed_twice_with_its_two_boxes_equals_the_reference() -> None:
    """The two crops list each image twice (query, key): the batched crop reads it once, each box its own view."""
    images = _images()
    cfg = _preset("moco_v2_200ep")
    params = ta.sample_params(2 * len(images), ta.image_sizes(images + images), cfg, torch.Generator().manual_seed(7))
    batched = ta.apply_params(images + images, params, cfg)
    _assert_same_views(batched, per_image_views(images + images, params, cfg))


@pytest.mark.parametrize("preset", ["moco_v1_200ep", "moco_v2_200ep"])
def test_v1_and_v2_two_crops_equal_the_per_image_reference(preset: str) -> None:
    cfg = _preset(preset)
    images = _images(seed=1)
    for seed in range(3):
        query, key = ta.TensorTwoCrops(cfg)(images, torch.Generator().manual_seed(seed))
        ref_query, ref_key = per_image_two_crops(images, cfg, torch.Generator().manual_seed(seed))
        _assert_same_views(query, ref_query)
        _assert_same_views(key, ref_key)
    last = ta.TensorTwoCrops(cfg, channels_last=True)(images, torch.Generator().manual_seed(2))
    assert last[0].is_contiguous(memory_format=torch.channels_last)
    _assert_same_views(last[0], ref_query)


def test_v3_asymmetric_views_equal_the_per_image_reference() -> None:
    """MoCo v3: the first view always blurs and never solarizes; the second blurs with p 0.1, solarizes with 0.2."""
    cfg = _preset("mocov3_r50_100ep")
    assert (cfg.blur_prob, cfg.blur_prob_view2, cfg.solarize_prob, cfg.solarize_prob_view2) == (1.0, 0.1, 0.0, 0.2)
    images = _images(SIZES * 2, seed=2)
    sizes = ta.image_sizes(images)
    solarized = 0
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        first, second = ta.sample_params(16, sizes, cfg, g, view=0), ta.sample_params(16, sizes, cfg, g, view=1)
        assert first.blur.all() and first.solarize is not None and not first.solarize.any()
        assert second.solarize is not None
        solarized += int(second.solarize.sum())
        query, key = ta.TensorTwoCrops(cfg)(images, torch.Generator().manual_seed(seed))
        ref_query, ref_key = per_image_two_crops(images, cfg, torch.Generator().manual_seed(seed))
        _assert_same_views(query, ref_query)
        _assert_same_views(key, ref_key, solarize_steps=3)
    assert solarized > 0  # the second view's solarize was exercised
