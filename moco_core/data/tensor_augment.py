"""MoCo's two-crop augmentation as batched tensor ops: the same code runs on CUDA and on the CPU.

This is the tensor counterpart of :func:`moco_core.data.augment.build_pretrain_transform` (the PIL path). The work is
split in two:

* :func:`sample_params` draws every random choice for one view of ``N`` images on the CPU from a
  ``torch.Generator``: the RandomResizedCrop box (torchvision's ``get_params`` algorithm: 10 tries of an area in
  ``crop_scale`` times the image area and a log-uniform aspect ratio in [3/4, 4/3], then the central crop clamped
  to the ratio range), whether colour jitter applies (``color_jitter_prob``), the four jitter factors
  (brightness, contrast and saturation uniform in ``[max(0, 1 - x), 1 + x]``, hue uniform in ``[-h, h]``) and a
  random order of the four jitter ops (torchvision's ColorJitter applies them in a random order), the grayscale
  flag, the blur flag and sigma (uniform in ``blur_sigma``), the flip flag and, where the config solarizes either
  view (MoCo v3), the solarize flag; view 1 takes the second view's blur and solarize probabilities.
* :func:`apply_params` does the pixel work on the images' device: crop and antialiased bilinear resize (batched),
  then batched colour jitter (each sample with its own factors and op order), grayscale (ITU-R 601-2 luma
  ``0.299 R + 0.587 G + 0.114 B``, as PIL's ``convert("L")``), Gaussian blur (a depthwise convolution with a
  per-sample kernel), solarize (values at or above 128/255 inverted, as PIL's), horizontal flip, and normalisation
  with ``cfg.mean`` / ``cfg.std``. The colour order follows ``cfg.grayscale_before_jitter`` (v1: grayscale, then
  jitter; v2: jitter, then grayscale), as the PIL path.

:class:`TensorTwoCrops` draws two independent parameter sets for the same decoded images (the query and key
views); :mod:`moco_core.data.jpeg` decodes the JPEG bytes they start from (batched with nvJPEG on CUDA).

Where the result differs from the PIL path, and why it is still the same augmentation:

* Random numbers: the parameters come from one ``torch.Generator`` in a vectorised order, so a seed does not
  reproduce the PIL pipeline's views; the distributions of every parameter are the PIL path's.
* Resize: ``roi_align`` samples the crop at a bilinear resize's points and averages a grid of them over each
  output pixel's footprint when downscaling (a box prefilter; PIL's is a triangle over the same footprint): about
  one uint8 level from torchvision's antialiased resize on photographs (44.5 dB PSNR at worst; the test asks for
  40). At the crop's border the sample points half a pixel outside it read the image around the crop, where a
  crop-then-resize clamps to the crop's edge. On CPU and CUDA alike it runs in float; the crop is rounded to uint8
  levels once, as PIL's.
* Colour: PIL's ColorJitter (``ImageEnhance``) rounds to uint8 after every op, its contrast blends with the
  integer-rounded mean of the ``L`` image, and its hue works in PIL's 8-bit HSV (the hue is quantised to 1/256
  of a turn and the shift truncated to ``int(hue * 255) / 255``). Here the colour ops run on float images in
  [0, 1] with no rounding: the formulas are torchvision's ``adjust_*`` on float tensors, with PIL's luma weights
  (torchvision's tensor grayscale uses 0.2989 for R instead of 0.299, a difference below 1e-4).
* Blur: PIL's ``GaussianBlur(radius=sigma)`` approximates a Gaussian of standard deviation ``sigma`` with three
  box blurs and replicates edge pixels. Here the kernel is the sampled Gaussian of that sigma truncated at
  ``radius = ceil(3 * sigma)`` (kernel size ``2 * ceil(3 * sigma) + 1``, at least 99.7% of the mass), normalised,
  applied separably with reflect padding (torchvision's ``gaussian_blur`` convention); the radius is clamped to
  ``crop_size - 1`` because reflect padding needs it smaller than the image.
* JPEG decoding (:mod:`moco_core.data.jpeg`): nvJPEG and libjpeg-turbo may differ by a few levels (nvJPEG's chroma
  upsampling of 4:2:0 images is not libjpeg's "fancy" interpolation); CPU decoding is libjpeg-turbo, as PIL's.

Each difference is a rounding- or kernel-level change to a pixel (about one uint8 level, or a slightly different
blur profile at the same sigma), far below the spread the augmentation itself introduces, and the parameter
distributions are identical; the tests check the parameter distributions, each op against torchvision on fixed
parameters, and the statistics of whole views against the PIL path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as nnf
import torchvision.ops  # noqa: F401  (registers torch.ops.torchvision.roi_align)

from moco_core.data.augment import view_probs
from moco_core.pretrain_config import AugmentConfig

CROP_RATIO: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)  # RandomResizedCrop's default aspect-ratio range
CROP_TRIES = 10  # torchvision's RandomResizedCrop tries this many random boxes before the central fallback
LUMA_WEIGHTS: tuple[float, float, float] = (0.299, 0.587, 0.114)  # ITU-R 601-2, PIL's convert("L")
BLUR_TRUNCATE = 3.0  # the blur kernel's radius is ceil(BLUR_TRUNCATE * sigma)

# Jitter op ids, as torchvision's ColorJitter numbers them (``fn_idx``); columns of ``AugmentParams.jitter_factors``.
BRIGHTNESS, CONTRAST, SATURATION, HUE = range(4)

Images = Sequence[torch.Tensor] | torch.Tensor


@dataclass(frozen=True)
class AugmentParams:
    """Per-sample random parameters of one view of ``N`` images (CPU tensors, first dimension ``N``)."""

    boxes: torch.Tensor  # (N, 4) int64: top, left, height, width of the crop
    jitter: torch.Tensor  # (N,) bool: colour jitter applies
    jitter_factors: torch.Tensor  # (N, 4) float32: brightness, contrast, saturation, hue
    jitter_order: torch.Tensor  # (N, 4) int64: a permutation of the op ids, applied left to right
    grayscale: torch.Tensor  # (N,) bool
    blur: torch.Tensor  # (N,) bool
    blur_sigma: torch.Tensor  # (N,) float32
    flip: torch.Tensor  # (N,) bool: horizontal flip
    solarize: torch.Tensor | None = None  # (N,) bool (MoCo v3); None: no solarize configured, nothing drawn

    def __len__(self) -> int:
        return int(self.boxes.shape[0])

    @classmethod
    def cat(cls, parts: Sequence[AugmentParams]) -> AugmentParams:
        """The parameters of several draws, one after the other (for several image lists concatenated)."""
        out = {f.name: torch.cat([getattr(p, f.name) for p in parts]) for f in fields(cls) if f.name != "solarize"}
        if any(p.solarize is not None for p in parts):
            out["solarize"] = torch.cat([torch.zeros(len(p), dtype=torch.bool) if p.solarize is None else p.solarize
                                         for p in parts])
        return cls(**out)


# ---------------------------------------------------------------------------------------------------------
# Sampling (CPU)


def _uniform(u: torch.Tensor, low: float | torch.Tensor, high: float | torch.Tensor) -> torch.Tensor:
    """Map uniforms ``u`` in [0, 1) to [low, high) in float32: ``low + (high - low) * u``."""
    low_t = torch.as_tensor(low, dtype=torch.float32)
    high_t = torch.as_tensor(high, dtype=torch.float32)
    return low_t + (high_t - low_t) * u.to(torch.float32)


def _uniform_int(u: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Map uniforms ``u`` in [0, 1) to integers in ``[0, count)`` (like ``torch.randint(0, count)``)."""
    return torch.floor(u.to(torch.float64) * count).long().clamp_(min=0).minimum(count.long() - 1)


def crop_boxes_from_uniforms(
    sizes: torch.Tensor,
    u_area: torch.Tensor,
    u_log_ratio: torch.Tensor,
    u_position: torch.Tensor,
    scale: Sequence[float],
    ratio: Sequence[float] = CROP_RATIO,
) -> torch.Tensor:
    """RandomResizedCrop boxes ``(top, left, height, width)`` from given uniforms, vectorised over samples.

    The algorithm is torchvision's ``RandomResizedCrop.get_params``: for each sample, try ``u_area.shape[1]``
    boxes of area ``scale`` times the image area and aspect ratio ``exp(U(log ratio))``; take the first whose
    rounded size fits, placed uniformly (``u_position``); if none fits, take the central crop of the whole image
    clamped to the ratio range. Try ``t`` uses ``u_area[:, t]`` and ``u_log_ratio[:, t]``, as torchvision's
    two ``uniform_`` calls of that try. ``sizes`` is ``(N, 2)``: height, width.
    """
    height = sizes[:, 0:1].to(torch.float64)
    width = sizes[:, 1:2].to(torch.float64)
    log_ratio = torch.log(torch.tensor([float(r) for r in ratio], dtype=torch.float32))
    target_area = height * width * _uniform(u_area, scale[0], scale[1]).to(torch.float64)
    aspect = torch.exp(_uniform(u_log_ratio, log_ratio[0], log_ratio[1])).to(torch.float64)
    w = torch.round(torch.sqrt(target_area * aspect))
    h = torch.round(torch.sqrt(target_area / aspect))
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = fits.to(torch.uint8).argmax(dim=1, keepdim=True)  # the first try that fits (0 when none does)
    h = h.gather(1, first).squeeze(1)
    w = w.gather(1, first).squeeze(1)
    height, width = height.squeeze(1), width.squeeze(1)
    top = _uniform_int(u_position[:, 0], height - h + 1)
    left = _uniform_int(u_position[:, 1], width - w + 1)
    boxes = torch.stack([top, left, h.long(), w.long()], dim=1)
    fallback = ~fits.any(dim=1)
    if fallback.any():
        boxes[fallback] = _central_boxes(height[fallback], width[fallback], ratio)
    return boxes


def _central_boxes(height: torch.Tensor, width: torch.Tensor, ratio: Sequence[float]) -> torch.Tensor:
    """RandomResizedCrop's fallback: the whole image, cropped centrally to the nearest aspect ratio in range."""
    low, high = min(ratio), max(ratio)
    in_ratio = width / height
    h = torch.where(in_ratio < low, torch.round(width / low), height)
    w = torch.where(in_ratio > high, torch.round(height * high), width)
    top = torch.div(height - h, 2, rounding_mode="floor")
    left = torch.div(width - w, 2, rounding_mode="floor")
    return torch.stack([top, left, h, w], dim=1).long()


def jitter_ranges(cfg: AugmentConfig) -> tuple[tuple[float, float], ...]:
    """ColorJitter's factor ranges: brightness, contrast, saturation in ``[max(0, 1 - x), 1 + x]``; hue ``[-h, h]``."""
    brightness, contrast, saturation, hue = (float(v) for v in cfg.color_jitter)
    if min(brightness, contrast, saturation, hue) < 0 or hue > 0.5:
        raise ValueError(f"color_jitter needs non-negative strengths and hue <= 0.5, got {cfg.color_jitter}")
    ranges = [(max(0.0, 1.0 - x), 1.0 + x) for x in (brightness, contrast, saturation)]
    return (*ranges, (-hue, hue))


def enabled_jitter_ops(cfg: AugmentConfig) -> tuple[int, ...]:
    """The jitter ops with a non-zero strength (torchvision's ColorJitter skips the others)."""
    return tuple(op for op, strength in enumerate(cfg.color_jitter) if strength > 0)


def image_sizes(images: Images) -> torch.Tensor:
    """``(N, 2)`` int64 heights and widths of a list of CHW images or of an NCHW batch."""
    if isinstance(images, torch.Tensor) and images.ndim == 4:
        return torch.tensor([list(images.shape[-2:])] * images.shape[0], dtype=torch.int64).reshape(-1, 2)
    return torch.tensor([list(img.shape[-2:]) for img in images], dtype=torch.int64).reshape(-1, 2)


def _as_sizes(n: int, height_width_per_image: Sequence[Sequence[int]] | torch.Tensor) -> torch.Tensor:
    """``(n, 2)`` int64 sizes from per-image ``(height, width)`` pairs; one pair is used for every image."""
    sizes = torch.as_tensor(height_width_per_image, dtype=torch.int64).reshape(-1, 2)
    if sizes.shape[0] == 1 and n != 1:
        sizes = sizes.expand(n, 2)
    if sizes.shape[0] != n:
        raise ValueError(f"expected {n} (height, width) pairs, got {sizes.shape[0]}")
    if n and int(sizes.min()) <= 0:
        raise ValueError("image heights and widths must be positive")
    return sizes


def sample_params(
    n: int,
    height_width_per_image: Sequence[Sequence[int]] | torch.Tensor,
    cfg: AugmentConfig,
    generator: torch.Generator | None = None,
    view: int = 0,
) -> AugmentParams:
    """Draw the random parameters of one view of ``n`` images on the CPU (``generator``: a CPU generator).

    Every draw is made whatever the probabilities, in a fixed order (crop, jitter, grayscale, blur, flip, then
    solarize where the config solarizes either view), so a generator state always gives the same parameters.
    Flags use ``u < p``, as torchvision's random transforms. ``view`` 1 takes the second view's blur and solarize
    probabilities (MoCo v3's asymmetric views; :func:`moco_core.data.augment.view_probs`).
    """
    blur_prob, solarize_prob = view_probs(cfg, view)
    sizes = _as_sizes(n, height_width_per_image)

    def rand(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=generator)

    boxes = crop_boxes_from_uniforms(sizes, rand(n, CROP_TRIES), rand(n, CROP_TRIES), rand(n, 2), cfg.crop_scale)
    jitter = rand(n) < cfg.color_jitter_prob
    low, high = (torch.tensor(bounds, dtype=torch.float32) for bounds in zip(*jitter_ranges(cfg), strict=True))
    factors = _uniform(rand(n, 4), low, high)
    order = rand(n, 4).argsort(dim=1)  # a uniformly random permutation per sample
    grayscale = rand(n) < cfg.grayscale_prob
    blur = rand(n) < blur_prob
    sigma = _uniform(rand(n), cfg.blur_sigma[0], cfg.blur_sigma[1])
    flip = rand(n) < cfg.flip_prob
    # drawn only where a view solarizes: the draws of v1/v2 configs stay those they always were
    solarize = rand(n) < solarize_prob if max(view_probs(cfg, 0)[1], view_probs(cfg, 1)[1]) > 0 else None
    return AugmentParams(boxes, jitter, factors, order, grayscale, blur, sigma, flip, solarize)


# ---------------------------------------------------------------------------------------------------------
# Batched colour ops on float images in [0, 1], (M, 3, H, W), each sample with its own factor


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small CPU tensor (parameters, indices) on ``device`` without holding the host: a copy to CUDA from
    pageable memory first waits for everything queued on the stream, which would stall the host at each of the
    pipeline's few dozen parameter copies; from pinned memory the copy is queued like a kernel."""
    if device.type != "cuda" or t.device.type != "cpu":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def _per_sample(factor: torch.Tensor | float, x: torch.Tensor) -> torch.Tensor:
    """A factor per sample as an ``(M, 1, 1, 1)`` tensor on ``x``'s device (a float applies to all)."""
    return to_device(torch.as_tensor(factor, dtype=x.dtype), x.device).reshape(-1, 1, 1, 1)


def rgb_to_grayscale(x: torch.Tensor, num_output_channels: int = 1) -> torch.Tensor:
    """Luma ``0.299 R + 0.587 G + 0.114 B`` (``LUMA_WEIGHTS``) of ``(..., 3, H, W)`` images, 1 or 3 channels."""
    r, g, b = x.unbind(dim=-3)
    wr, wg, wb = LUMA_WEIGHTS
    gray = (r * wr).add_(g, alpha=wg).add_(b, alpha=wb).unsqueeze(-3)  # three passes, not five
    return gray.expand_as(x) if num_output_channels == 3 else gray


def _blend(x: torch.Tensor, other: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``factor * x + (1 - factor) * other`` clamped to [0, 1] (torchvision's ``_blend`` on float images)."""
    return (x * factor + other * (1.0 - factor)).clamp_(0.0, 1.0)


def adjust_brightness(x: torch.Tensor, factor: torch.Tensor | float) -> torch.Tensor:
    """Blend with black: ``x * factor`` clamped to [0, 1]."""
    return (x * _per_sample(factor, x)).clamp_(0.0, 1.0)


def adjust_contrast(x: torch.Tensor, factor: torch.Tensor | float) -> torch.Tensor:
    """Blend with the mean of each sample's grayscale image."""
    mean = rgb_to_grayscale(x).mean(dim=(-3, -2, -1), keepdim=True)
    return _blend(x, mean, _per_sample(factor, x))


def adjust_saturation(x: torch.Tensor, factor: torch.Tensor | float) -> torch.Tensor:
    """Blend with each sample's grayscale image."""
    return _blend(x, rgb_to_grayscale(x), _per_sample(factor, x))


def adjust_hue(x: torch.Tensor, shift: torch.Tensor | float) -> torch.Tensor:
    """Rotate the hue by ``shift`` turns (in [-0.5, 0.5]): RGB to HSV, shift H modulo 1, back to RGB."""
    hue, saturation, value = _rgb_to_hsv(x)
    hue = (hue + _per_sample(shift, x).squeeze(1)).remainder_(1.0)
    return _hsv_to_rgb(hue, saturation, value)


def _rgb_to_hsv(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hue (turns, in [0, 1)), saturation and value of ``(M, 3, H, W)`` RGB images, each ``(M, H, W)``.

    Grey pixels (max == min) get hue 0 and saturation 0; where several channels share the maximum, red wins over
    green over blue (as PIL and torchvision).
    """
    r, g, b = x.unbind(dim=1)
    value, _ = x.max(dim=1)
    chroma = value - x.min(dim=1).values
    grey = chroma == 0  # also where value == 0
    saturation = chroma / torch.where(grey, torch.ones_like(value), value)
    safe_chroma = torch.where(grey, torch.ones_like(chroma), chroma)
    hue_r = (g - b) / safe_chroma
    hue_g = (b - r) / safe_chroma + 2.0
    hue_b = (r - g) / safe_chroma + 4.0
    sector = torch.where(value == r, hue_r, torch.where(value == g, hue_g, hue_b))
    hue = torch.where(grey, 0.0, sector / 6.0).remainder_(1.0)
    return hue, saturation, value


def _hsv_to_rgb(hue: torch.Tensor, saturation: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """``(M, 3, H, W)`` RGB from HSV, with the closed form ``c = v - v s clamp(min(k, 4 - k), 0, 1)``.

    ``k = (n + 6 hue) mod 6`` with ``n`` 5, 3 and 1 for red, green and blue.
    """
    offsets = to_device(torch.tensor([5.0, 3.0, 1.0], dtype=hue.dtype), hue.device).view(1, 3, 1, 1)
    k = (offsets + 6.0 * hue.unsqueeze(1)).remainder_(6.0)
    ramp = torch.minimum(k, 4.0 - k).clamp_(0.0, 1.0)
    v = value.unsqueeze(1)
    return (v - v * saturation.unsqueeze(1) * ramp).clamp_(0.0, 1.0)


JITTER_OPS: tuple[Callable[[torch.Tensor, torch.Tensor | float], torch.Tensor], ...] = (
    adjust_brightness,
    adjust_contrast,
    adjust_saturation,
    adjust_hue,
)


# ---------------------------------------------------------------------------------------------------------
# Blur, normalisation, crop


def blur_radius(sigma: torch.Tensor) -> torch.Tensor:
    """The Gaussian kernel's radius per sigma, ``ceil(3 sigma)`` (kernel size ``2 * radius + 1``)."""
    return torch.ceil(BLUR_TRUNCATE * sigma.to(torch.float64)).long()


def gaussian_kernels(sigma: torch.Tensor, radius: torch.Tensor) -> torch.Tensor:
    """Normalised 1-D Gaussian kernels, one row per sample, zero-padded to the largest ``2 * radius + 1`` taps."""
    sigma = sigma.to(torch.float64).clamp_min(1e-6).unsqueeze(1)
    largest = int(radius.max()) if radius.numel() else 0
    offsets = torch.arange(-largest, largest + 1, dtype=torch.float64)
    kernels = torch.exp(-0.5 * (offsets / sigma) ** 2) * (offsets.abs() <= radius.unsqueeze(1))
    return kernels / kernels.sum(dim=1, keepdim=True)


def gaussian_blur(x: torch.Tensor, sigma: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """Blur each ``(M, C, H, W)`` sample with its own sigma: a separable depthwise convolution, reflect padding.

    The kernel of a sample has ``2 * ceil(3 sigma) + 1`` taps (the radius clamped to ``min(H, W) - 1``); the samples
    go into the channel dimension, so one grouped convolution per direction blurs the whole batch. ``sigma`` is
    read on the CPU (pass a CPU tensor to avoid a device synchronisation).
    """
    m, c, height, width = x.shape
    sigma = torch.as_tensor(sigma, dtype=torch.float64).reshape(-1).cpu()
    if m == 0:
        return x
    radius = blur_radius(sigma).clamp_(0, min(height, width) - 1)
    kernels = to_device(gaussian_kernels(sigma, radius).to(x.dtype), x.device)
    kernels = kernels.repeat_interleave(c, dim=0)  # (M * C, K): sample i's kernel for each of its channels
    pad, taps = int(radius.max()), kernels.shape[1]
    out = nnf.pad(x.reshape(1, m * c, height, width), (pad, pad, pad, pad), mode="reflect")
    out = nnf.conv2d(out, kernels.view(m * c, 1, 1, taps), groups=m * c)
    out = nnf.conv2d(out, kernels.view(m * c, 1, taps, 1), groups=m * c)
    return out.reshape(m, c, height, width)


def normalize(x: torch.Tensor, mean: Sequence[float], std: Sequence[float], *,
              channels_last: bool = False) -> torch.Tensor:
    """``(x - mean) / std`` per channel, as ``x / std - mean / std`` in one pass, into a new tensor (channels_last
    if asked)."""
    scale = (1.0 / torch.tensor(std, dtype=torch.float64)).to(x.dtype)
    shift = (-torch.tensor(mean, dtype=torch.float64) * scale.double()).to(x.dtype)
    scale = to_device(scale, x.device).view(1, -1, 1, 1)
    shift = to_device(shift, x.device).view(1, -1, 1, 1)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    return torch.addcmul(shift, x, scale, out=torch.empty_like(x, memory_format=layout))


def _as_image_list(images: Images) -> list[torch.Tensor]:
    """A list of uint8 ``(3, H, W)`` images from a list or an ``(N, 3, H, W)`` batch; all on one device."""
    if isinstance(images, torch.Tensor):
        if images.ndim != 4:
            raise ValueError(f"a batch of images must be (N, 3, H, W), got shape {tuple(images.shape)}")
        images = list(images.unbind(0))
    images = list(images)
    for img in images:
        if img.dtype != torch.uint8 or img.ndim != 3 or img.shape[0] != 3:
            raise ValueError(f"images must be uint8 (3, H, W) tensors, got {img.dtype} {tuple(img.shape)}")
    if len({img.device for img in images}) > 1:
        raise ValueError("all images must be on the same device")
    return images


def canvas_size(n: int) -> int:
    """``n`` rounded up to a multiple of a quarter of its octave (300 -> 320, 419 -> 448, 559 -> 640, 64 -> 64):
    images whose rounded heights and widths agree share one canvas, each padded by less than a quarter of a side."""
    step = 1 << max(n.bit_length() - 3, 0)
    return -(-n // step) * step


def crop_and_resize(images: Images, boxes: torch.Tensor, size: int) -> torch.Tensor:
    """Crop each image to its box and resize to ``size`` x ``size``: float32 (N, 3, S, S) in [0, 1], rounded to
    uint8 levels (PIL's resize returns uint8), on the images' device.

    The resampling is ``roi_align``'s. With ``aligned`` boxes its sample points are those of a bilinear resize
    without corner alignment (output pixel ``j`` reads ``left - 0.5 + (j + 0.5) * w / S``), edges clamped as a
    resize clamps them; where the crop is larger than ``S`` each output pixel averages a ``ceil(w / S)`` x
    ``ceil(h / S)`` grid of such samples over its footprint (``sampling_ratio`` 0), a box prefilter that keeps the
    downscaling antialiased, as PIL's and torchvision's antialiased bilinear are (their prefilter is a triangle
    over the same footprint: results differ by about a uint8 level on photographs).

    Batched: images of similar size (``canvas_size`` of height and width) are gathered into one (n, 3, H, W)
    canvas, each padded by repeating its last row and column, and one ``roi_align`` resamples every view of them.
    A sample point lies at most half a pixel past the image's last row or column, where the padding holds what
    the clamp of a lone image's edge would read: the views are those of one ``roi_align`` per image. An image
    listed twice, as the two crops list it, is gathered once.
    """
    images = _as_image_list(images)
    if len(images) != boxes.shape[0]:
        raise ValueError(f"{len(images)} images but {boxes.shape[0]} crop boxes")
    if not images:
        return torch.empty((0, 3, size, size), dtype=torch.float32)
    device = images[0].device
    distinct: dict[int, int] = {}  # id(image) -> index into `sources`
    sources: list[torch.Tensor] = []
    for img in images:
        if distinct.setdefault(id(img), len(sources)) == len(sources):
            sources.append(img)
    buckets: dict[tuple[int, int], list[int]] = {}
    for k, img in enumerate(sources):
        buckets.setdefault((canvas_size(int(img.shape[1])), canvas_size(int(img.shape[2]))), []).append(k)
    ordered = [k for ks in buckets.values() for k in ks]  # sources in bucket order
    place = {k: (b, j) for b, ks in enumerate(buckets.values()) for j, k in enumerate(ks)}
    flat = torch.cat([sources[k].reshape(-1) for k in ordered])  # uint8, every source once
    heights = torch.tensor([int(sources[k].shape[1]) for k in ordered])
    widths = torch.tensor([int(sources[k].shape[2]) for k in ordered])
    offsets = torch.cumsum(3 * heights * widths, 0) - 3 * heights * widths
    index_type = torch.int32 if flat.numel() < 2**31 else torch.int64
    views_of: list[list[int]] = [[] for _ in buckets]
    for v, img in enumerate(images):
        views_of[place[distinct[id(img)]][0]].append(v)
    order = [v for views in views_of for v in views]
    top, left, h, w = boxes[order].to(torch.float32).unbind(1)
    batch_index = torch.tensor([place[distinct[id(images[v])]][1] for v in order], dtype=torch.float32)
    # One copy for every small tensor the device needs: the sources' offset, height and width; the views' boxes.
    meta = torch.cat([torch.stack([offsets, heights, widths], 1).to(torch.float64).reshape(-1),
                      torch.stack([batch_index, left, top, left + w, top + h], 1).to(torch.float64).reshape(-1)])
    meta = to_device(meta, device)
    source_meta = meta[:3 * len(ordered)].view(-1, 3).to(index_type)
    rois = meta[3 * len(ordered):].view(-1, 5).to(torch.float32)
    out, first, row = [], 0, 0
    for ((height, width), ks), views in zip(buckets.items(), views_of, strict=True):
        offset, h_img, w_img = (t.view(-1, 1, 1, 1) for t in source_meta[first:first + len(ks)].unbind(1))
        rows = torch.minimum(torch.arange(height, device=device, dtype=index_type).view(1, 1, -1, 1), h_img - 1)
        cols = torch.minimum(torch.arange(width, device=device, dtype=index_type).view(1, 1, 1, -1), w_img - 1)
        channel = torch.arange(3, device=device, dtype=index_type).view(1, 3, 1, 1)
        index = (offset + channel * h_img * w_img + rows * w_img) + cols  # (n, 3, H, W), edges repeated
        canvas = flat.index_select(0, index.view(-1)).view(len(ks), 3, height, width).to(torch.float32)
        # (input, rois, spatial_scale, height, width, sampling_ratio 0: adaptive, aligned): the op itself, not
        # torchvision.ops.roi_align, whose Python checks cost more than the kernel
        out.append(torch.ops.torchvision.roi_align(canvas, rois[row:row + len(views)], 1.0, size, size, 0, True))
        first += len(ks)
        row += len(views)
    crops = torch.cat(out) if len(out) > 1 else out[0]
    if order != list(range(len(images))):
        crops = torch.empty_like(crops).index_copy_(0, to_device(torch.tensor(order), device), crops)
    return crops.round_().div_(255.0)


# ---------------------------------------------------------------------------------------------------------
# The pipeline


def _update_where(
    x: torch.Tensor, mask: torch.Tensor, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """Replace the samples of ``x`` selected by the CPU ``mask`` with ``fn(those samples, their CPU indices)``.

    The indices are computed on the CPU and copied to the device, so nothing waits for the device. Samples not
    selected are left untouched (bit for bit).
    """
    index_cpu = mask.nonzero().squeeze(1)
    if index_cpu.numel() == 0:
        return x
    index = to_device(index_cpu, x.device)
    return x.index_copy_(0, index, fn(x.index_select(0, index), index_cpu))


def color_jitter(x: torch.Tensor, params: AugmentParams, cfg: AugmentConfig) -> torch.Tensor:
    """ColorJitter per sample: the enabled ops in the sample's own order, only where ``params.jitter`` (in place).

    At each of the four positions every sample applies at most one op. Brightness, contrast and saturation are
    all blends ``clamp(a x + b gray(x) + c mean(gray(x)))`` (a = f; b = 1 - f for saturation, c = 1 - f for
    contrast), so the samples applying any of them at this position take one batched blend with per-sample
    ``a, b, c`` (a = 1, b = c = 0 leaves a sample bit for bit as it was); those applying hue go through the HSV
    round trip together. A position costs a few passes over the batch, whatever the mix of ops.
    """
    enabled = torch.zeros(4, dtype=torch.bool)
    enabled[list(enabled_jitter_ops(cfg))] = True
    for position in range(params.jitter_order.shape[1]):
        op = params.jitter_order[:, position]
        active = params.jitter & enabled[op]
        blend = active & (op != HUE)
        if blend.any():
            x = _blend_ops(x, op, blend, params.jitter_factors.gather(1, op[:, None]).squeeze(1))
        hue = active & (op == HUE)
        x = _update_where(x, hue, lambda sub, index: adjust_hue(sub, params.jitter_factors[index, HUE]))
    return x


def _blend_ops(x: torch.Tensor, op: torch.Tensor, mask: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Brightness, contrast or saturation (``op`` per sample, CPU) with ``factor`` where ``mask``, in one blend."""
    one = torch.ones_like(factor)
    a = torch.where(mask, factor, one)
    b = torch.where(mask & (op == SATURATION), 1.0 - factor, 0.0)
    c = torch.where(mask & (op == CONTRAST), 1.0 - factor, 0.0)
    gray = rgb_to_grayscale(x)  # (M, 1, H, W)
    other = gray * _per_sample(b, gray)
    if bool((c != 0).any()):
        other = other + gray.mean(dim=(-2, -1), keepdim=True) * _per_sample(c, gray)
    return torch.addcmul(other, x, _per_sample(a, x)).clamp_(0.0, 1.0)


def random_grayscale(x: torch.Tensor, params: AugmentParams) -> torch.Tensor:
    """Grayscale (3 equal channels) where ``params.grayscale`` (in place)."""
    return _update_where(x, params.grayscale, lambda sub, _: rgb_to_grayscale(sub, num_output_channels=3))


def random_blur(x: torch.Tensor, params: AugmentParams) -> torch.Tensor:
    """Gaussian blur with the sample's sigma where ``params.blur`` (in place)."""
    return _update_where(x, params.blur, lambda sub, index: gaussian_blur(sub, params.blur_sigma[index]))


SOLARIZE_THRESHOLD = 128 / 255  # PIL's ImageOps.solarize default, 128 of 255 levels


def solarize(x: torch.Tensor) -> torch.Tensor:
    """Values at or above 128/255 become 1 minus themselves (PIL's solarize on [0, 1] floats)."""
    return torch.where(x >= SOLARIZE_THRESHOLD, 1.0 - x, x)


def random_solarize(x: torch.Tensor, params: AugmentParams) -> torch.Tensor:
    """Solarize where ``params.solarize`` (in place); nothing when no solarize was drawn."""
    if params.solarize is None:
        return x
    return _update_where(x, params.solarize, lambda sub, _: solarize(sub))


def random_flip(x: torch.Tensor, params: AugmentParams) -> torch.Tensor:
    """Horizontal flip where ``params.flip`` (in place)."""
    return _update_where(x, params.flip, lambda sub, _: sub.flip(-1))


@torch.no_grad()
def apply_params(images: Images, params: AugmentParams, cfg: AugmentConfig, *,
                 channels_last: bool = False) -> torch.Tensor:
    """One view of each image with the given parameters: float32 ``(N, 3, S, S)``, normalised, on the images' device.

    ``images``: a list of uint8 ``(3, H, W)`` tensors (sizes may differ) or a uint8 ``(N, 3, H, W)`` batch.
    Steps: crop and resize, colour (grayscale and jitter in ``cfg``'s order), blur, solarize, flip, normalise; the last
    writes the views in the channels_last layout when asked (what the encoders take under ``run.channels_last``).
    """
    x = crop_and_resize(images, params.boxes, cfg.crop_size)
    if cfg.grayscale_before_jitter:
        x = color_jitter(random_grayscale(x, params), params, cfg)
    else:
        x = random_grayscale(color_jitter(x, params, cfg), params)
    x = random_flip(random_solarize(random_blur(x, params), params), params)
    return normalize(x, cfg.mean, cfg.std, channels_last=channels_last)


class TensorTwoCrops:
    """Two independently augmented views (query, key) of a batch of decoded images, computed on their device.

    The parameters of both views are drawn on the CPU from ``generator`` (query first), then both views are
    computed in one batch of ``2 N`` samples.

    On the CPU the work is many small tensor ops: on a busy machine give each process one intra-op thread (as
    DataLoader workers have) or set ``OMP_WAIT_POLICY=PASSIVE``, or OpenMP's spinning threads slow it down many
    times over.
    """

    def __init__(self, cfg: AugmentConfig, *, channels_last: bool = False) -> None:
        self.cfg = cfg
        self.channels_last = channels_last

    def __call__(
        self, images: Images, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        images = _as_image_list(images)
        n = len(images)
        sizes = image_sizes(images)
        query = sample_params(n, sizes, self.cfg, generator, view=0)
        key = sample_params(n, sizes, self.cfg, generator, view=1)
        views = apply_params(images + images, AugmentParams.cat([query, key]), self.cfg,
                             channels_last=self.channels_last)
        return views[:n], views[n:]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.cfg!r})"


__all__ = [
    "AugmentParams",
    "TensorTwoCrops",
    "apply_params",
    "crop_boxes_from_uniforms",
    "gaussian_blur",
    "sample_params",
]
