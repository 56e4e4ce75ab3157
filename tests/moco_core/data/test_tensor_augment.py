"""Tests for moco_core.data.tensor_augment and moco_core.data.jpeg, on the CPU: parameter distributions, each op against
torchvision on fixed parameters, whole views against the PIL path (statistically), JPEG decoding, determinism.
CUDA-only checks are marked ``gpu`` and skipped without a GPU."""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms.transforms as tv_transforms
from PIL import Image, ImageOps
from torchvision.transforms import RandomResizedCrop
from torchvision.transforms.v2 import functional as TF

from moco_core.data import jpeg
from moco_core.data import tensor_augment as ga
from moco_core.data.augment import build_pretrain_transform
from moco_core.data.shapes import generate_shapes
from moco_core.data.tensor_augment import AugmentParams, TensorTwoCrops, apply_params, sample_params
from moco_core.pretrain_config import AugmentConfig

V2 = AugmentConfig(
    crop_size=32,
    color_jitter=(0.4, 0.4, 0.4, 0.1),
    color_jitter_prob=0.8,
    grayscale_prob=0.2,
    grayscale_before_jitter=False,
    blur_prob=0.5,
    blur_sigma=(0.1, 2.0),
)
TORCHVISION_LUMA = (0.2989, 0.587, 0.114)  # torchvision's tensor rgb_to_grayscale (PIL and ITU-R 601-2: 0.299)
SIZES = [(64, 64), (48, 80), (80, 48), (17, 23), (30, 400)]  # the last never fits a box: always the fallback
TV_JITTER = (TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue)


@pytest.fixture(autouse=True)
def _one_intra_op_thread() -> Iterator[None]:
    """The tensor path is many small ops: on a shared, busy CPU, intra-op threads mostly wait for each other
    (the statistical test ran 80x slower with 2 threads than with 1 here)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _random_images(sizes: list[tuple[int, int]], seed: int = 0) -> list[torch.Tensor]:
    g = _generator(seed)
    return [torch.randint(0, 256, (3, h, w), generator=g, dtype=torch.uint8) for h, w in sizes]


def _binomial_ok(flags: torch.Tensor, p: float, sigmas: float = 5.0) -> bool:
    n = flags.numel()
    return abs(flags.double().mean().item() - p) <= sigmas * math.sqrt(p * (1 - p) / n) + 1e-12


# ---------------------------------------------------------------------------------------------------------
# Crop boxes


class _ScriptedUniform:
    """Stands for ``torch.empty(1)``: ``uniform_(lo, hi)`` returns the next scripted number mapped to [lo, hi)."""

    def __init__(self, numbers: Iterator[float]) -> None:
        self.numbers = numbers

    def uniform_(self, low: float | torch.Tensor, high: float | torch.Tensor) -> torch.Tensor:
        u = torch.tensor(next(self.numbers), dtype=torch.float32)
        low_t, high_t = torch.as_tensor(low, dtype=torch.float32), torch.as_tensor(high, dtype=torch.float32)
        return (low_t + (high_t - low_t) * u).reshape(1)


class _ScriptedTorch:
    """``torch`` for torchvision's ``get_params``, drawing from scripted uniforms instead of the global RNG."""

    def __init__(self, uniforms: list[float], positions: list[float]) -> None:
        self._uniforms = iter(uniforms)
        self._positions = iter(positions)

    def __getattr__(self, name: str) -> object:
        return getattr(torch, name)

    def empty(self, *size: int) -> _ScriptedUniform:
        return _ScriptedUniform(self._uniforms)

    def randint(self, low: int, high: int, size: tuple[int, ...]) -> torch.Tensor:
        u = next(self._positions)
        return torch.tensor([low + math.floor(u * (high - low))])


def test_crop_boxes_equal_torchvision_get_params_fed_the_same_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    g = _generator(0)
    n = 150
    fallbacks = 0
    for scale in [(0.2, 1.0), (0.9, 1.0)]:
        for h, w in SIZES:
            u_area, u_ratio = torch.rand(n, 10, generator=g), torch.rand(n, 10, generator=g)
            u_pos = torch.rand(n, 2, generator=g)
            ours = ga.crop_boxes_from_uniforms(torch.tensor([[h, w]] * n), u_area, u_ratio, u_pos, scale)
            image = torch.zeros(3, h, w)
            for k in range(n):
                uniforms = torch.stack([u_area[k], u_ratio[k]], dim=1).reshape(-1).tolist()  # area, ratio per try
                monkeypatch.setattr(tv_transforms, "torch", _ScriptedTorch(uniforms, u_pos[k].tolist()))
                expected = RandomResizedCrop.get_params(image, list(scale), [3 / 4, 4 / 3])
                monkeypatch.undo()
                assert tuple(ours[k].tolist()) == expected, (h, w, scale, k)
                fallbacks += expected == ((h - expected[2]) // 2, (w - expected[3]) // 2, *expected[2:])
    assert fallbacks >= 2 * n  # the fallback branch ran (always for 30x400)


def _box_is_consistent(box: list[int], h_img: int, w_img: int, scale: tuple[float, float]) -> bool:
    """Some real (w, h) within rounding of the box has an area in scale and a ratio in [3/4, 4/3] (necessary)."""
    _, _, h, w = box
    area = h_img * w_img
    area_ok = (w - 0.5) * (h - 0.5) <= scale[1] * area + 1e-9 and (w + 0.5) * (h + 0.5) >= scale[0] * area - 1e-9
    ratio_ok = (w - 0.5) / (h + 0.5) <= 4 / 3 and (w + 0.5) / (h - 0.5) >= 3 / 4
    return area_ok and ratio_ok


def _central_box(h_img: int, w_img: int) -> list[int]:
    ratio = w_img / h_img
    h, w = h_img, w_img
    if ratio < 3 / 4:
        h = round(w_img / (3 / 4))
    elif ratio > 4 / 3:
        w = round(h_img * 4 / 3)
    return [(h_img - h) // 2, (w_img - w) // 2, h, w]


def test_crop_boxes_lie_inside_the_image_with_scale_and_ratio_in_range() -> None:
    cfg = AugmentConfig(crop_scale=(0.2, 1.0))
    n = 2000
    for h_img, w_img in SIZES:
        params = sample_params(n, [(h_img, w_img)], cfg, _generator(1))
        top, left, h, w = params.boxes.unbind(1)
        assert bool((top >= 0).all() and (left >= 0).all() and (h >= 1).all() and (w >= 1).all())
        assert bool((top + h <= h_img).all() and (left + w <= w_img).all())
        fallback = _central_box(h_img, w_img)
        for box in params.boxes.tolist():
            assert _box_is_consistent(box, h_img, w_img, cfg.crop_scale) or box == fallback, (h_img, w_img, box)
        if (h_img, w_img) == (64, 64):  # the area fraction covers the scale range
            fraction = (h * w).double() / (h_img * w_img)
            assert fraction.min() < 0.21 and fraction.max() > 0.97
            aspect = w.double() / h
            assert aspect.min() < 0.77 and aspect.max() > 1.30
            assert len(set(top.tolist())) > 30 and len(set(left.tolist())) > 30  # placed anywhere
        if (h_img, w_img) == (30, 400):
            assert params.boxes.tolist() == [fallback] * n


def test_sample_params_takes_one_size_per_image() -> None:
    sizes = [(10, 20), (300, 40), (50, 60)]
    params = sample_params(3, sizes, AugmentConfig(), _generator(2))
    for (h_img, w_img), (top, left, h, w) in zip(sizes, params.boxes.tolist(), strict=True):
        assert top + h <= h_img and left + w <= w_img
    with pytest.raises(ValueError):
        sample_params(2, sizes, AugmentConfig(), _generator(2))


def _ks_statistic(a: torch.Tensor, b: torch.Tensor) -> float:
    """Two-sample Kolmogorov-Smirnov distance between the empirical distributions of ``a`` and ``b``."""
    grid = torch.cat([a, b]).unique()
    cdf_a = torch.searchsorted(a.sort().values, grid, right=True).double() / len(a)
    cdf_b = torch.searchsorted(b.sort().values, grid, right=True).double() / len(b)
    return float((cdf_a - cdf_b).abs().max())


def test_crop_distribution_matches_torchvision_own_sampler() -> None:
    n, (h_img, w_img) = 2000, (48, 80)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        theirs = torch.tensor([RandomResizedCrop.get_params(torch.zeros(3, h_img, w_img), [0.2, 1.0], [3 / 4, 4 / 3])
                               for _ in range(n)], dtype=torch.float64)
    ours = sample_params(n, [(h_img, w_img)], AugmentConfig(), _generator(3)).boxes.double()

    def features(boxes: torch.Tensor) -> list[torch.Tensor]:
        top, left, h, w = boxes.unbind(1)
        return [h * w / (h_img * w_img), w / h, (top + h / 2) / h_img, (left + w / 2) / w_img]

    # KS critical distance for two samples of 2000 at alpha 0.001: 1.95 * sqrt(2 / 2000) = 0.062.
    for theirs_f, ours_f in zip(features(theirs), features(ours), strict=True):
        assert _ks_statistic(theirs_f, ours_f) < 0.062


# ---------------------------------------------------------------------------------------------------------
# Flags and jitter factors


def test_flag_probabilities_match_the_config() -> None:
    cfg = AugmentConfig(color_jitter_prob=0.8, grayscale_prob=0.2, blur_prob=0.5, flip_prob=0.3)
    params = sample_params(4000, [(32, 32)], cfg, _generator(4))
    assert _binomial_ok(params.jitter, 0.8)
    assert _binomial_ok(params.grayscale, 0.2)
    assert _binomial_ok(params.blur, 0.5)
    assert _binomial_ok(params.flip, 0.3)
    never = sample_params(500, [(32, 32)], AugmentConfig(color_jitter_prob=0, grayscale_prob=0, flip_prob=0),
                          _generator(5))
    assert not (never.jitter.any() or never.grayscale.any() or never.blur.any() or never.flip.any())
    always = sample_params(500, [(32, 32)], AugmentConfig(grayscale_prob=1, blur_prob=1, flip_prob=1), _generator(5))
    assert bool(always.jitter.all() and always.grayscale.all() and always.blur.all() and always.flip.all())


def test_jitter_order_is_a_uniform_random_permutation() -> None:
    order = sample_params(4000, [(32, 32)], AugmentConfig(), _generator(6)).jitter_order
    assert torch.equal(order.sort(dim=1).values, torch.arange(4).expand(4000, 4))
    for position in range(4):
        for op in range(4):
            assert _binomial_ok(order[:, position] == op, 0.25)
    assert len({tuple(row) for row in order.tolist()}) == 24


@pytest.mark.parametrize("strengths", [(0.4, 0.4, 0.4, 0.1), (1.5, 0.0, 0.8, 0.5)])
def test_jitter_factors_lie_in_and_cover_the_configured_ranges(strengths: tuple[float, ...]) -> None:
    cfg = AugmentConfig(color_jitter=strengths, blur_sigma=(0.1, 2.0))
    params = sample_params(4000, [(32, 32)], cfg, _generator(7))
    b, c, s, h = strengths
    ranges = [(max(0.0, 1 - b), 1 + b), (max(0.0, 1 - c), 1 + c), (max(0.0, 1 - s), 1 + s), (-h, h)]
    columns = [params.jitter_factors[:, op] for op in range(4)] + [params.blur_sigma]
    for values, (low, high) in zip(columns, ranges + [cfg.blur_sigma], strict=True):
        assert values.min() >= low - 1e-6 and values.max() <= high + 1e-6
        # 4000 uniform draws leave a gap above 0.5% of the range at an end with probability (0.995)^4000 < 1e-8.
        assert values.min() <= low + 0.005 * (high - low) and values.max() >= high - 0.005 * (high - low)


# ---------------------------------------------------------------------------------------------------------
# Exactness against torchvision on fixed parameters


def _fixed_params() -> AugmentParams:
    """Six samples covering every op, several jitter orders, flags on and off."""
    return AugmentParams(
        boxes=torch.tensor([[5, 7, 30, 40], [0, 0, 48, 64], [10, 3, 20, 20], [2, 9, 40, 31], [0, 0, 12, 16],
                            [1, 1, 33, 33]]),
        jitter=torch.tensor([True, True, False, True, True, False]),
        jitter_factors=torch.tensor([[1.3, 0.7, 1.4, 0.08], [0.6, 1.35, 0.65, -0.1], [1.4, 1.4, 1.4, 0.3],
                                     [1.0, 1.2, 0.0, 0.5], [0.8, 0.9, 1.6, -0.45], [1.2, 1.2, 1.2, 0.2]]),
        jitter_order=torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0], [0, 1, 2, 3], [2, 0, 3, 1], [1, 3, 0, 2],
                                   [0, 1, 2, 3]]),
        grayscale=torch.tensor([False, True, False, False, True, True]),
        blur=torch.tensor([False, True, True, True, False, False]),
        blur_sigma=torch.tensor([1.0, 1.3, 0.4, 2.0, 1.0, 1.0]),
        flip=torch.tensor([True, False, False, True, True, False]),
    )


def _reference_view(img: torch.Tensor, params: AugmentParams, i: int, cfg: AugmentConfig) -> torch.Tensor:
    """Sample ``i``'s view with torchvision.transforms.v2.functional, one op at a time."""
    x = ga.crop_and_resize([img], params.boxes[i:i + 1], cfg.crop_size)[0]  # checked against torchvision below

    def jitter(x: torch.Tensor) -> torch.Tensor:
        if params.jitter[i]:
            for op in params.jitter_order[i].tolist():
                x = TV_JITTER[op](x, float(params.jitter_factors[i, op]))
        return x

    def gray(x: torch.Tensor) -> torch.Tensor:
        return TF.rgb_to_grayscale(x, num_output_channels=3) if params.grayscale[i] else x

    x = jitter(gray(x)) if cfg.grayscale_before_jitter else gray(jitter(x))
    if params.blur[i]:
        sigma = float(params.blur_sigma[i])
        size = 2 * math.ceil(3 * sigma) + 1
        x = TF.gaussian_blur(x, [size, size], [sigma, sigma])
    if params.flip[i]:
        x = TF.horizontal_flip(x)
    return TF.normalize(x, list(cfg.mean), list(cfg.std))


@pytest.mark.parametrize("grayscale_before_jitter", [False, True])
def test_apply_params_equals_torchvision_ops_in_the_sample_order(
    monkeypatch: pytest.MonkeyPatch, grayscale_before_jitter: bool
) -> None:
    monkeypatch.setattr(ga, "LUMA_WEIGHTS", TORCHVISION_LUMA)
    cfg = AugmentConfig(
        crop_size=24, color_jitter=(0.5, 0.5, 1.0, 0.5), grayscale_before_jitter=grayscale_before_jitter
    )
    images = _random_images([(48, 64), (48, 64), (40, 30), (64, 48), (12, 16), (40, 40)])
    images[0][:, :10] = images[0][:1, :10]  # grey pixels for the hue conversion
    params = _fixed_params()
    out = apply_params(images, params, cfg)
    assert out.shape == (6, 3, 24, 24) and out.dtype == torch.float32
    for i, img in enumerate(images):
        torch.testing.assert_close(out[i], _reference_view(img, params, i, cfg), atol=1e-4, rtol=0)


def test_without_random_ops_a_view_is_the_normalised_crop() -> None:
    cfg = AugmentConfig(crop_size=20)
    images = _random_images([(48, 64), (30, 30), (64, 20)], seed=3)
    params = sample_params(3, ga.image_sizes(images), cfg, _generator(8))
    none = torch.zeros(3, dtype=torch.bool)
    params = AugmentParams(params.boxes, none, params.jitter_factors, params.jitter_order, none, none,
                           params.blur_sigma, none)
    out = apply_params(images, params, cfg)
    crops = ga.crop_and_resize(images, params.boxes, 20)
    expected = (crops - torch.tensor(cfg.mean).view(3, 1, 1)) / torch.tensor(cfg.std).view(3, 1, 1)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    assert torch.equal(crops * 255, (crops * 255).round())  # rounded to uint8 levels once, as PIL's resize
    in_channels_last = apply_params(images, params, cfg, channels_last=True)
    assert in_channels_last.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(in_channels_last, out)


def _photo(seed: int, height: int, width: int) -> torch.Tensor:
    """A photograph-like uint8 image: smooth colour structure plus grain (as ../shared/gpu/make_jpegs.py draws)."""
    rng = np.random.default_rng(seed)
    low = rng.integers(0, 256, (height // 16 + 1, width // 16 + 1, 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(low).resize((width, height), Image.BICUBIC), dtype=np.int16)
    grain = rng.integers(-24, 24, (height, width, 3))
    return torch.from_numpy((smooth + grain).clip(0, 255).astype(np.uint8)).permute(2, 0, 1).contiguous()


def _psnr(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per image, in dB, of uint8-scaled (N, 3, H, W) images."""
    mse = (a.double() - b.double()).square().mean(dim=(1, 2, 3))
    return 10 * torch.log10(255**2 / mse)


def test_crops_match_torchvision_antialiased_resized_crop_on_photographs() -> None:
    """Downscaling by up to ~2x (crops of 20-100% of 300-440 px images to 224) against torchvision's antialiased
    bilinear resized_crop (PIL's filter): measured 44.5 dB at worst and 0.8 levels mean absolute difference."""
    images = [_photo(i, 300 + 7 * i, 400 + 5 * i) for i in range(12)]
    params = sample_params(12, ga.image_sizes(images), AugmentConfig(crop_size=224), _generator(30))
    ours = ga.crop_and_resize(images, params.boxes, 224) * 255
    theirs = torch.stack([TF.resized_crop(img, *box.tolist(), [224, 224], antialias=True)
                          for img, box in zip(images, params.boxes, strict=True)])
    assert float(_psnr(ours, theirs).min()) > 40.0
    assert float((ours - theirs.double()).abs().mean()) < 1.2


def test_upscaled_crops_are_bilinear_inside_and_read_the_neighbours_at_the_border() -> None:
    """Upscaling: the same sample points as a bilinear resize of the cropped region, so the interior equals
    torchvision's within rounding. At the crop's border the sample points of the first and last rows and columns
    (half a source pixel outside it) interpolate with the image's pixels around the crop, where a crop-then-resize
    clamps to the crop's own edge: a difference confined to a frame half a source pixel wide (1-2 output pixels
    at 2.5x)."""
    images = [_photo(i, 100, 120) for i in range(3)]
    boxes = torch.tensor([[3, 5, 90, 100], [0, 0, 100, 120], [10, 20, 50, 60]])
    ours = ga.crop_and_resize(images, boxes, 224) * 255
    theirs = torch.stack([TF.resized_crop(img, *box.tolist(), [224, 224], antialias=True).double()
                          for img, box in zip(images, boxes, strict=True)])
    assert float((ours - theirs)[..., 3:-3, 3:-3].abs().max()) <= 1.0  # 2.5x: the frame is ~1.25 px wide
    assert float((ours[1] - theirs[1]).abs().max()) <= 1.0  # the whole image: no neighbours to read
    assert float((ours - theirs).abs().max()) > 2.0  # the frame does differ where there are neighbours


def test_canvas_sizes_round_up_within_a_quarter_octave() -> None:
    assert [ga.canvas_size(n) for n in (1, 7, 17, 64, 65, 300, 375, 419, 500, 559, 4000)] == [
        1, 7, 20, 64, 80, 320, 384, 448, 512, 640, 4096]
    for n in range(1, 3000):
        assert n <= ga.canvas_size(n) < n * 1.25


def test_crops_of_many_sizes_and_repeated_images_land_in_order() -> None:
    """Views are computed in groups of equal image size (one roi_align each) and put back in the given order;
    an image listed twice is read once and gives the same view for the same box."""
    images = _random_images([(48, 64), (30, 30), (48, 64), (17, 23), (30, 30)], seed=31)
    boxes = torch.tensor([[5, 7, 30, 40], [0, 0, 30, 30], [2, 2, 40, 40], [1, 1, 15, 20], [4, 3, 20, 21]])
    both = ga.crop_and_resize(images + images, torch.cat([boxes, boxes]), 16)
    one_by_one = torch.cat([ga.crop_and_resize([img], box[None], 16) for img, box in zip(images, boxes, strict=True)])
    assert torch.equal(both[:5], one_by_one) and torch.equal(both[5:], one_by_one)


@pytest.mark.parametrize("op", range(4))
def test_each_batched_jitter_op_equals_torchvision(monkeypatch: pytest.MonkeyPatch, op: int) -> None:
    monkeypatch.setattr(ga, "LUMA_WEIGHTS", TORCHVISION_LUMA)
    x = torch.rand(16, 3, 9, 11, generator=_generator(9))
    x[:, :, :2] = x[:, :1, :2]  # grey pixels
    x[:, 1, 4] = x[:, 0, 4]  # channel ties
    factors = torch.linspace(-0.5, 0.5, 16) if op == ga.HUE else torch.linspace(0.0, 2.0, 16)
    out = ga.JITTER_OPS[op](x.clone(), factors)
    expected = torch.stack([TV_JITTER[op](x[i], float(factors[i])) for i in range(16)])
    torch.testing.assert_close(out, expected, atol=1e-4 if op == ga.HUE else 1e-5, rtol=0)


def test_disabled_jitter_ops_leave_the_image_untouched() -> None:
    x = torch.rand(8, 3, 6, 6, generator=_generator(10))
    params = sample_params(8, [(6, 6)], AugmentConfig(color_jitter_prob=1.0), _generator(10))
    out = ga.color_jitter(x.clone(), params, AugmentConfig(color_jitter=(0.0, 0.0, 0.0, 0.0)))
    assert torch.equal(out, x)


def test_grayscale_is_pil_luma_and_close_to_torchvision() -> None:
    img = _random_images([(20, 30)], seed=11)[0]
    ours = ga.rgb_to_grayscale(img.float().unsqueeze(0) / 255, num_output_channels=3)[0]
    assert torch.equal(ours[0], ours[1]) and torch.equal(ours[1], ours[2])
    pil = torch.from_numpy(np.asarray(Image.fromarray(img.permute(1, 2, 0).numpy()).convert("L"), dtype=np.float32))
    assert (ours[0] * 255 - pil).abs().max() <= 0.51  # PIL rounds to uint8
    torchvision = TF.rgb_to_grayscale(img.float() / 255, num_output_channels=3)
    torch.testing.assert_close(ours, torchvision, atol=1.5e-4, rtol=0)  # 0.299 vs 0.2989 for red: <= 1e-4


def test_blur_equals_torchvision_gaussian_blur_per_sample() -> None:
    sigmas = torch.tensor([0.1, 0.5, 1.0, 2.0, 1.37, 0.9])
    x = torch.rand(6, 3, 32, 32, generator=_generator(12))
    out = ga.gaussian_blur(x, sigmas)
    for i, sigma in enumerate(sigmas.tolist()):
        size = 2 * math.ceil(3 * sigma) + 1
        torch.testing.assert_close(out[i], TF.gaussian_blur(x[i], [size, size], [sigma, sigma]), atol=1e-5, rtol=0)


def test_blur_of_a_small_image_clamps_the_radius() -> None:
    out = ga.gaussian_blur(torch.rand(2, 3, 5, 5, generator=_generator(13)), torch.tensor([2.0, 0.5]))
    assert out.shape == (2, 3, 5, 5) and torch.isfinite(out).all()


# ---------------------------------------------------------------------------------------------------------
# The whole pipeline against the PIL path


def _view_statistics(views: torch.Tensor, cfg: AugmentConfig) -> torch.Tensor:
    """Per view, in [0, 1] units: channel means (3), channel stds (3), mean chroma (max - min), mean |dx|."""
    x = views * torch.tensor(cfg.std).view(1, 3, 1, 1) + torch.tensor(cfg.mean).view(1, 3, 1, 1)
    chroma = (x.amax(1) - x.amin(1)).mean(dim=(1, 2))
    # A grayscale view's chroma is rounding noise from undoing the normalisation (up to ~1e-7, and not the same
    # for both paths, whose normalisations round differently): call it 0, or its 20% of the mass would decide the
    # KS distance below.
    chroma = torch.where(chroma < 1e-5, 0.0, chroma)
    gradient = (x[..., 1:] - x[..., :-1]).abs().mean(dim=(1, 2, 3))
    return torch.cat([x.mean(dim=(2, 3)), x.std(dim=(2, 3)), chroma[:, None], gradient[:, None]], dim=1)


def test_views_match_the_pil_path_statistically(tmp_path: Path) -> None:
    generate_shapes(tmp_path, image_size=64, train_per_class=2, val_per_class=1)
    pil_images = [Image.open(p).convert("RGB") for p in sorted((tmp_path / "train").rglob("*.png"))]
    assert len(pil_images) == 16
    tensors = [torch.from_numpy(np.array(im)).permute(2, 0, 1).contiguous() for im in pil_images]
    repeats = 128  # 16 images x 128 = 2048 views per path
    with torch.random.fork_rng():
        torch.manual_seed(0)
        transform = build_pretrain_transform(V2)
        pil_views = torch.stack([transform(im) for _ in range(repeats) for im in pil_images])
    two_crops, g = TensorTwoCrops(V2), _generator(14)
    tensor_views = torch.cat([view for _ in range(repeats // 2) for view in two_crops(tensors, g)])
    a, b = _view_statistics(pil_views, V2), _view_statistics(tensor_views, V2)
    # Standard error of the difference of the two means from the per-view spread (each image appears equally often
    # in both, so this over-estimates the error: conservative). Allowance for the known systematic differences:
    # PIL's ImageEnhance truncates each blend to uint8 (about -0.4 level per brightness/contrast/saturation op, up
    # to 3 ops in 80% of views) and its blur differs by under a level: 2 levels (0.008) for intensities and
    # chroma; blur profiles change the mean |dx| by < 0.0005. Without blur the |dx| moves by ~0.003, and with
    # grayscale p 0.3 instead of 0.2 the chroma by ~0.027, both caught.
    se = (a.var(0) / len(a) + b.var(0) / len(b)).sqrt()
    allowance = torch.tensor([2 / 255] * 7 + [0.0005])
    diff = (a.mean(0) - b.mean(0)).abs()
    assert bool((diff <= 4.5 * se + allowance).all()), (diff, se)
    # The distributions of each statistic over views: the two-sample KS critical distance at alpha 0.001 for 2048
    # and 2048 views is 1.95 * sqrt(2 / 2048) = 0.061; 0.07 leaves room for the blur-profile difference (the |dx|
    # distance is 0.03-0.046 over seeds, the others <= 0.037). No jitter (0.115), no blur (0.165), grayscale p 0.3
    # (0.109), brightness 0.6 (0.09) or crop scale from 0.5 (0.078) exceed it.
    distances = [_ks_statistic(a[:, j], b[:, j]) for j in range(a.shape[1])]
    assert max(distances) < 0.07, str(distances)
    gray_pil = (a[:, 6] == 0).double().mean().item()  # views with equal channels: grayscale ones
    gray_tensor = (b[:, 6] == 0).double().mean().item()
    assert abs(gray_pil - V2.grayscale_prob) < 0.05 and abs(gray_tensor - V2.grayscale_prob) < 0.05


# ---------------------------------------------------------------------------------------------------------
# Two crops: shapes, independence, determinism


def test_two_crops_shapes_independence_and_determinism() -> None:
    images = _random_images([(48, 64), (64, 48), (40, 40), (100, 30)], seed=15)
    two_crops = TensorTwoCrops(V2)
    query, key = two_crops(images, _generator(16))
    assert query.shape == key.shape == (4, 3, 32, 32) and query.dtype == torch.float32
    assert not torch.equal(query, key)
    again = two_crops(images, _generator(16))
    assert torch.equal(query, again[0]) and torch.equal(key, again[1])
    other = two_crops(images, _generator(17))
    assert not torch.equal(query, other[0])
    g = _generator(16)
    sizes = ga.image_sizes(images)
    first, second = sample_params(4, sizes, V2, g), sample_params(4, sizes, V2, g)
    torch.testing.assert_close(query, apply_params(images, first, V2), atol=1e-5, rtol=0)
    torch.testing.assert_close(key, apply_params(images, second, V2), atol=1e-5, rtol=0)


def test_a_batch_tensor_gives_the_same_views_as_a_list() -> None:
    batch = torch.stack(_random_images([(40, 50)] * 5, seed=18))
    from_batch = TensorTwoCrops(V2)(batch, _generator(19))
    from_list = TensorTwoCrops(V2)(list(batch), _generator(19))
    assert all(torch.equal(a, b) for a, b in zip(from_batch, from_list, strict=True))


def test_apply_params_rejects_non_uint8_images() -> None:
    params = sample_params(1, [(8, 8)], V2, _generator(20))
    with pytest.raises(ValueError):
        apply_params([torch.rand(3, 8, 8)], params, V2)


# ---------------------------------------------------------------------------------------------------------
# JPEG decoding


def _jpeg(image: Image.Image, **save: object) -> torch.Tensor:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90, **save)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _jpeg_cases() -> list[tuple[str, torch.Tensor, int]]:
    rng = np.random.default_rng(21)
    smooth = np.kron(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8), np.ones((5, 5, 1), dtype=np.uint8))
    rgb = Image.fromarray(smooth, "RGB")
    exif = Image.Exif()
    exif[0x010F] = "moco tests"  # an APP1 segment before the frame header
    return [
        ("RGB", _jpeg(rgb, exif=exif.tobytes()), 3),
        ("L", _jpeg(rgb.convert("L")), 1),
        ("CMYK", _jpeg(rgb.convert("CMYK")), 4),
        ("progressive", _jpeg(rgb, progressive=True), 3),
    ]


def test_decode_jpegs_on_cpu_matches_pil_and_gives_rgb() -> None:
    cases = _jpeg_cases()
    decoded = jpeg.decode_jpegs([data for _, data, _ in cases], "cpu")
    for (name, data, components), img in zip(cases, decoded, strict=True):
        assert jpeg.jpeg_num_components(data) == components, name
        assert img.dtype == torch.uint8 and img.shape == (3, 30, 40), name
        pil = Image.open(io.BytesIO(data.numpy().tobytes())).convert("RGB")
        reference = torch.from_numpy(np.array(pil)).permute(2, 0, 1)
        assert (img.float() - reference.float()).abs().mean() < 1.0, name
    assert jpeg.decode_jpegs([], "cpu") == []
    with pytest.raises(ValueError):
        jpeg.jpeg_num_components(torch.tensor([1, 2, 3, 4], dtype=torch.uint8))


# ---------------------------------------------------------------------------------------------------------
# CUDA (skipped without a GPU)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@needs_cuda
def test_decode_jpegs_on_cuda_matches_cpu() -> None:
    """nvJPEG against libjpeg-turbo, on what matters: the same shape and orientation for every kind of JPEG; the
    same pixels up to the decoders' rounding on photographs (nvJPEG upsamples 4:2:0 chroma without libjpeg's
    "fancy" interpolation, which shows most at sharp colour edges: the 5-px colour blocks of the cases above
    differ by a mean of 10 levels), 4:4:4 exactly; CMYK exactly, as it is decoded on the CPU."""
    photos = [_photo(i, 90 + 13 * i, 120 + 7 * i) for i in range(6)]
    datas = [_jpeg(Image.fromarray(p.permute(1, 2, 0).numpy()), subsampling=s)
             for p, s in zip(photos, [0, 1, 2, 2, 2, 2], strict=True)]  # 4:4:4, 4:2:2, 4:2:0
    on_cpu, on_cuda = jpeg.decode_jpegs(datas, "cpu"), jpeg.decode_jpegs(datas, "cuda")
    for a, b in zip(on_cpu, on_cuda, strict=True):
        assert b.is_cuda and b.dtype == torch.uint8 and b.shape == a.shape
    psnr = torch.cat([_psnr(b.cpu()[None], a[None]) for a, b in zip(on_cpu, on_cuda, strict=True)])
    assert float(psnr.min()) > 32.0, psnr.tolist()  # measured on an H100: 34.4-35.5 dB (4:4:4: identical)
    cases = _jpeg_cases()
    on_cpu = jpeg.decode_jpegs([data for _, data, _ in cases], "cpu")
    on_cuda = jpeg.decode_jpegs([data for _, data, _ in cases], "cuda")
    for (name, _, _), a, b in zip(cases, on_cpu, on_cuda, strict=True):
        assert b.is_cuda and b.shape == a.shape == (3, 30, 40), name
        if name == "CMYK":
            assert torch.equal(a, b.cpu())
        if name == "L":
            assert torch.equal(b[0], b[1]) and torch.equal(b[1], b[2])
        # orientation: the two decodes correlate far better as they are than mirrored or flipped
        ref = a.double() - a.double().mean()
        same = float((b.cpu().double() - b.double().mean().cpu()).mul(ref).mean())
        assert same > 2 * float((b.cpu().flip(-1).double() - b.double().mean().cpu()).mul(ref).mean()), name


@pytest.mark.gpu
@needs_cuda
def test_two_crops_on_cuda_match_cpu_for_the_same_generator() -> None:
    images = _random_images([(48, 64), (64, 48), (40, 40), (100, 30)] * 4, seed=22)
    on_cpu = TensorTwoCrops(V2)(images, _generator(23))
    on_cuda = TensorTwoCrops(V2)([img.cuda() for img in images], _generator(23))
    for a, b in zip(on_cpu, on_cuda, strict=True):
        assert b.is_cuda
        # The CUDA resize runs in float and rounds (up to a level from the CPU's uint8 kernel), amplified by the
        # jitter factors and the normalisation.
        assert (a - b.cpu()).abs().mean() < 0.02


# ---------------------------------------------------------------------------------------------------------
# MoCo v3's asymmetric views: blur 1.0 / 0.1, solarize 0 / 0.2

V3 = AugmentConfig(crop_size=32, color_jitter=(0.4, 0.4, 0.2, 0.1), color_jitter_prob=0.8, grayscale_prob=0.2,
                   grayscale_before_jitter=False, blur_prob=1.0, blur_prob_view2=0.1, solarize_prob=0.0,
                   solarize_prob_view2=0.2)


def test_v3_views_draw_their_own_blur_and_solarize_probabilities() -> None:
    first = sample_params(4000, [(32, 32)], V3, _generator(21), view=0)
    second = sample_params(4000, [(32, 32)], V3, _generator(22), view=1)
    assert bool(first.blur.all()) and first.solarize is not None and not first.solarize.any()
    assert _binomial_ok(second.blur, 0.1) and second.solarize is not None and _binomial_ok(second.solarize, 0.2)
    # configs that solarize nowhere draw nothing for it: v1/v2 views are the ones they always were
    assert sample_params(8, [(32, 32)], V2, _generator(23), view=1).solarize is None


def test_solarize_equals_pil_on_every_level() -> None:
    levels = torch.arange(256, dtype=torch.uint8).view(1, 1, 16, 16).expand(1, 3, 16, 16)
    pil = Image.fromarray(levels[0].permute(1, 2, 0).numpy(), "RGB")
    expected = torch.from_numpy(np.array(ImageOps.solarize(pil))).permute(2, 0, 1).float() / 255
    torch.testing.assert_close(ga.solarize(levels.float() / 255)[0], expected)
    assert ga.solarize(torch.tensor([127 / 255, 128 / 255, 1.0])).tolist() == pytest.approx([127 / 255, 127 / 255, 0])


def test_two_crops_solarize_only_the_second_view() -> None:
    images = _random_images([(40, 40)] * 64, seed=24)
    cfg = AugmentConfig(crop_size=32, crop_scale=(1.0, 1.0), color_jitter_prob=0.0, grayscale_prob=0.0,
                        flip_prob=0.0, solarize_prob=0.0, solarize_prob_view2=1.0)
    first, second = TensorTwoCrops(cfg)(images, _generator(25))
    plain = apply_params(images, sample_params(64, ga.image_sizes(images), cfg, _generator(25), view=0), cfg)
    torch.testing.assert_close(first, plain)
    mean, std = torch.tensor(cfg.mean).view(1, 3, 1, 1), torch.tensor(cfg.std).view(1, 3, 1, 1)
    pixels = second * std + mean  # every value of the second view is below 128/255 once solarized
    assert bool((pixels < 128 / 255 + 1e-5).all()) and not bool((first * std + mean < 128 / 255 - 1e-5).all())
