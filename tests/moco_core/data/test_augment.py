"""Tests for moco_core.data.augment: view shapes, determinism, normalisation, grayscale, blur, step order."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image, ImageFilter
from torchvision import transforms as T

from moco_core.data import augment
from moco_core.data.augment import (
    RandomGaussianBlur,
    TwoCrops,
    build_eval_transform,
    build_pretrain_transform,
)
from moco_core.pretrain_config import AugmentConfig

NO_RANDOMNESS = dict(
    crop_scale=(1.0, 1.0),
    color_jitter_prob=0.0,
    grayscale_prob=0.0,
    blur_prob=0.0,
    flip_prob=0.0,
)


def _noise_image(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), "RGB")


def _unnormalise(x: torch.Tensor, cfg: AugmentConfig) -> torch.Tensor:
    mean = torch.tensor(cfg.mean).view(3, 1, 1)
    std = torch.tensor(cfg.std).view(3, 1, 1)
    return x * std + mean


def test_two_crops_shapes_and_independence() -> None:
    torch.manual_seed(0)
    views = TwoCrops(build_pretrain_transform(AugmentConfig(crop_size=32)))
    query, key = views(_noise_image(64, 48))
    for view in (query, key):
        assert view.shape == (3, 32, 32)
        assert view.dtype == torch.float32
    assert not torch.equal(query, key)


def test_seeded_pipeline_is_deterministic() -> None:
    views = TwoCrops(build_pretrain_transform(AugmentConfig(crop_size=32, blur_prob=0.5)))
    img = _noise_image(64, 48)
    torch.manual_seed(0)
    first = views(img)
    torch.manual_seed(0)
    second = views(img)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_normalisation_of_constant_image() -> None:
    cfg = AugmentConfig(crop_size=16, **NO_RANDOMNESS)
    colour = (200, 100, 30)
    out = build_pretrain_transform(cfg)(Image.new("RGB", (40, 40), colour))
    assert out.shape == (3, 16, 16)
    for c in range(3):
        expected = (colour[c] / 255 - cfg.mean[c]) / cfg.std[c]
        torch.testing.assert_close(out[c], torch.full((16, 16), expected), atol=1e-6, rtol=0)


def test_grayscale_always_gives_equal_channels() -> None:
    cfg = AugmentConfig(crop_size=24, **{**NO_RANDOMNESS, "grayscale_prob": 1.0})
    torch.manual_seed(0)
    out = _unnormalise(build_pretrain_transform(cfg)(_noise_image(40, 40)), cfg)
    torch.testing.assert_close(out[0], out[1], atol=1e-5, rtol=0)
    torch.testing.assert_close(out[1], out[2], atol=1e-5, rtol=0)
    assert out.std() > 0.05  # still an image, not a constant


def _max_neighbour_difference(img: Image.Image) -> int:
    arr = np.asarray(img.convert("L"), dtype=np.int32)
    return int(max(np.abs(np.diff(arr, axis=0)).max(), np.abs(np.diff(arr, axis=1)).max()))


def test_blur_softens_a_sharp_edge() -> None:
    arr = np.zeros((32, 32, 3), dtype=np.uint8)
    arr[:, 16:] = 255
    img = Image.fromarray(arr, "RGB")
    assert _max_neighbour_difference(img) == 255
    torch.manual_seed(0)
    blurred = RandomGaussianBlur((1.0, 2.0))(img)
    assert blurred.size == img.size
    assert _max_neighbour_difference(blurred) < 200


def test_blur_sigma_is_drawn_in_range(monkeypatch: pytest.MonkeyPatch) -> None:
    radii: list[float] = []
    real = ImageFilter.GaussianBlur

    def recording_blur(radius: float = 2) -> ImageFilter.GaussianBlur:
        radii.append(radius)
        return real(radius=radius)

    monkeypatch.setattr(augment.ImageFilter, "GaussianBlur", recording_blur)
    blur = RandomGaussianBlur((0.1, 2.0))
    torch.manual_seed(0)
    img = _noise_image(16, 16)
    for _ in range(50):
        blur(img)
    assert len(radii) == 50
    assert all(0.1 <= r <= 2.0 for r in radii)
    assert len(set(radii)) > 1
    torch.manual_seed(0)
    assert blur.sample_sigma() == radii[0]  # drawn from torch's RNG


def test_blur_rejects_bad_range() -> None:
    with pytest.raises(ValueError):
        RandomGaussianBlur((2.0, 0.1))


def _step_types(transform: object) -> list[type]:
    assert isinstance(transform, T.Compose)
    types: list[type] = []
    for step in transform.transforms:
        if isinstance(step, T.RandomApply):
            types.append(T.RandomApply)
            types.extend(type(inner) for inner in step.transforms)
        else:
            types.append(type(step))
    return types


def test_v1_order_grayscale_then_jitter() -> None:
    steps = _step_types(build_pretrain_transform(AugmentConfig()))
    assert steps == [
        T.RandomResizedCrop,
        T.RandomGrayscale,
        T.ColorJitter,
        T.RandomHorizontalFlip,
        T.ToTensor,
        T.Normalize,
    ]


def test_v2_order_jitter_then_grayscale_then_blur() -> None:
    cfg = AugmentConfig(
        color_jitter=(0.4, 0.4, 0.4, 0.1),
        color_jitter_prob=0.8,
        grayscale_before_jitter=False,
        blur_prob=0.5,
    )
    transform = build_pretrain_transform(cfg)
    assert _step_types(transform) == [
        T.RandomResizedCrop,
        T.RandomApply,
        T.ColorJitter,
        T.RandomGrayscale,
        T.RandomApply,
        RandomGaussianBlur,
        T.RandomHorizontalFlip,
        T.ToTensor,
        T.Normalize,
    ]
    assert transform.transforms[1].p == 0.8
    assert transform.transforms[3].p == 0.5
    assert transform.transforms[3].transforms[0].sigma == (0.1, 2.0)


def test_zero_probability_steps_are_left_out() -> None:
    steps = _step_types(build_pretrain_transform(AugmentConfig(**NO_RANDOMNESS)))
    assert steps == [T.RandomResizedCrop, T.ToTensor, T.Normalize]


@pytest.mark.parametrize(("crop", "resize", "short_side"), [(224, None, 256), (32, None, 37), (32, 40, 40)])
def test_eval_transform_size(crop: int, resize: int | None, short_side: int) -> None:
    transform = build_eval_transform(crop, resize)
    assert transform.transforms[0].size == short_side
    out = transform(_noise_image(300, 260))
    assert out.shape == (3, crop, crop)
    torch.manual_seed(0)
    assert torch.equal(transform(_noise_image(300, 260)), out)  # deterministic


def test_v3_views_are_asymmetric() -> None:
    cfg = AugmentConfig(crop_size=32, blur_prob=1.0, blur_prob_view2=0.1, solarize_prob=0.0, solarize_prob_view2=0.2)
    assert augment.view_probs(cfg, 0) == (1.0, 0.0) and augment.view_probs(cfg, 1) == (0.1, 0.2)
    two = augment.build_two_crops(cfg)
    first = [t for t in two.transform.transforms if isinstance(t, T.RandomApply)]
    second = [t for t in two.second.transforms if isinstance(t, T.RandomApply)]
    assert [(type(t.transforms[0]).__name__, t.p) for t in first] == [("RandomGaussianBlur", 1.0)]
    assert [(type(t.transforms[0]).__name__, t.p) for t in second] == [("RandomGaussianBlur", 0.1), ("Solarize", 0.2)]
    # v1/v2 configs: both views alike
    v2 = AugmentConfig(blur_prob=0.5)
    assert augment.view_probs(v2, 1) == augment.view_probs(v2, 0) == (0.5, 0.0)


def test_solarize_by_hand() -> None:
    img = Image.fromarray(np.array([[[0, 127, 128], [200, 255, 64]]], dtype=np.uint8), "RGB")
    assert np.array(augment.Solarize()(img)).tolist() == [[[0, 127, 127], [55, 0, 64]]]
