"""The tensor augmentation's two crops on the CPU: image by image against batched (issue 61).

    .venv/bin/python benchmarks/batched_augment.py                      # batch 64, 224 px, v1 v2 v3, 1 thread
    .venv/bin/python benchmarks/batched_augment.py --batch 64 --crop 224 --presets moco_v2_200ep --repeats 5

For each preset: the two crops (query and key views) of one batch of decoded images, computed
- ``per-image``: image by image (``tests/moco_core/data/per_image_augment.py``, the equality tests' reference:
  ``roi_align`` on each image alone, each jitter op per image in its order, the flags as ``if``s);
- ``batched``: ``TensorTwoCrops``, what the tensor pipeline runs (one ``roi_align`` per bucket of similar image
  sizes, the colour jitter as one blend per op position, each flagged op on its samples gathered together, the
  blur as one grouped convolution per direction).
Both draw the same parameters from the same seed; the script prints the largest difference between their views.

Figures: the median wall time of ``--repeats`` rounds after an untimed one (the two take turns in each round),
images/s (images, not views), and the pixel ops one batch runs: leaf aten ops (ops that call no other op) with an
input of at least one crop's ``crop x crop`` elements, counted by torch.profiler; on CUDA each is about one kernel
launch (the ops on the small parameter tensors run on the CPU there). The images are ``--batch``
photograph-like uint8 images (a coarse random grid upsampled) of ImageNet's usual sizes (500 x 375, 375 x 500,
500 x 333, ...) scaled to ``--max-side``, made once from a fixed seed. ``--max-side 64 --crop 32 --batch 128`` is
the ``embedded`` preset's setting on CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from moco_core.config import load_config
from moco_core.data.tensor_augment import TensorTwoCrops
from moco_core.pretrain_config import AugmentConfig, PretrainConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: the reference lives in tests/
from tests.moco_core.data.per_image_augment import per_image_two_crops  # noqa: E402

# ImageNet's most frequent sizes (height, width), cycled over the batch
SIZES = [(375, 500), (500, 375), (333, 500), (500, 333), (400, 500), (500, 400), (281, 500), (500, 500)]
Views = tuple[torch.Tensor, torch.Tensor]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--max-side", type=int, default=500, help="the images' longer side (ImageNet's: 500)")
    p.add_argument("--presets", nargs="+", default=["moco_v1_200ep", "moco_v2_200ep", "mocov3_r50_100ep"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--json", action="store_true")
    return p.parse_args()


def photo_like_images(count: int, max_side: int = 500, seed: int = 0) -> list[torch.Tensor]:
    """``count`` uint8 (3, H, W) images of ImageNet's usual shapes, the longer side ``max_side``: smooth random
    content, like photographs."""
    g = torch.Generator().manual_seed(seed)
    images = []
    for i in range(count):
        h, w = (max(1, round(side * max_side / 500)) for side in SIZES[i % len(SIZES)])
        coarse = torch.rand(1, 3, h // 16 + 2, w // 16 + 2, generator=g) * 255
        images.append(F.interpolate(coarse, size=(h, w), mode="bilinear")[0].round().to(torch.uint8))
    return images


def seconds(fns: dict[str, Callable[[], Views]], repeats: int) -> tuple[dict[str, float], dict[str, Views]]:
    """Each function's median wall time over ``repeats`` rounds after an untimed one, the functions taking turns in
    each round (a shared machine's load then weighs on all alike), and each one's last result."""
    outs = {name: fn() for name, fn in fns.items()}
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            outs[name] = fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}, outs


def pixel_ops(fn: Callable[[], Views], pixels: int) -> int:
    """The aten ops one call runs that call no other op and read a tensor of at least ``pixels`` elements."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    return sum(1 for e in prof.events() if e.name.startswith("aten::") and not e.cpu_children
               and any(math.prod(shape) >= pixels for shape in e.input_shapes if shape))


def measure(cfg: AugmentConfig, images: list[torch.Tensor], repeats: int) -> dict[str, float]:
    def batched() -> Views:
        return TensorTwoCrops(cfg)(images, torch.Generator().manual_seed(0))

    def per_image() -> Views:
        return per_image_two_crops(images, cfg, torch.Generator().manual_seed(0))

    fns = {"per_image": per_image, "batched": batched}
    times, views = seconds(fns, repeats)
    row: dict[str, float] = {}
    for name, fn in fns.items():
        row[f"{name}_ms"] = times[name] * 1000
        row[f"{name}_images_s"] = len(images) / times[name]
        row[f"{name}_ops"] = pixel_ops(fn, cfg.crop_size**2)
    diffs = torch.cat([(a - b).abs().flatten() for a, b in zip(views["per_image"], views["batched"], strict=True)])
    row["max_abs_diff"] = float(diffs.max())
    row["beyond_2e-5"] = int((diffs > 2e-5).sum())  # the equality tests' tolerance
    return row


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    images = photo_like_images(args.batch, args.max_side)
    rows = {}
    for preset in args.presets:
        cfg = dataclasses.replace(load_config(PretrainConfig, preset, check=False).augment, crop_size=args.crop)
        rows[preset] = measure(cfg, images, args.repeats)
    if args.json:
        print(json.dumps({"batch": args.batch, "crop": args.crop, "max_side": args.max_side, "threads": args.threads,
                          "rows": rows}))
        return
    print(f"two crops of {args.batch} images (longer side {args.max_side}) at {args.crop} px, {args.threads} "
          f"thread(s), torch {torch.__version__}")
    print("| preset | per-image ms (images/s, pixel ops) | batched ms (images/s, pixel ops) | speed-up "
          "| max diff (values > 2e-5) |")
    print("|---|---|---|---|---|")
    for preset, r in rows.items():
        print(f"| {preset} | {r['per_image_ms']:.0f} ({r['per_image_images_s']:.0f}, {r['per_image_ops']:.0f}) "
              f"| {r['batched_ms']:.0f} ({r['batched_images_s']:.0f}, {r['batched_ops']:.0f}) "
              f"| {r['per_image_ms'] / r['batched_ms']:.2f}x | {r['max_abs_diff']:.1e} ({r['beyond_2e-5']:.0f}) |")


if __name__ == "__main__":
    main()
