"""CPU step speed (images/s) of MoCo v3 on the embedded data: ResNet-18 and the tiny ViT against MoCo v2.

Each preset (``embedded``: v2 ResNet-18, K 1024; ``mocov3_embedded``: v3 ResNet-18; ``mocov3_vit_embedded``: v3
vit_nano_p4) is built as ``moco pretrain`` builds it (``build_method``, ``build_optimizer``), and its step is
the engine's own ``train_step`` (v3: with the per-step lr and momentum schedule first). All three train on the
same views: ``--batches`` batches of the embedded images, decoded and augmented once beforehand by the tensor
pipeline with the v2 preset's augmentation (the views' content does not change a step's cost), so the figures
are the steps alone. The presets take turns, ``--rounds`` times, each round timing ``--steps`` steps after
``--warmup`` untimed ones, so that a machine whose load changes affects them alike; the median of the rounds is
reported, and the ratio to v2.

An image is one sample of the batch, which both methods see as two views: per image, v2 runs the query encoder
forward and backward and the key encoder forward; v3 runs the base encoder forward and backward on both views
and the momentum encoder forward on both, plus its 4096-wide heads.

Run from the repository root (2 threads, as a run on the 2-core machine uses):
    .venv/bin/python benchmarks/mocov3_step.py --rounds 3 --steps 10
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from itertools import cycle
from typing import Any

import torch
from torch.utils.data import DataLoader

from moco_core.config import VIT_ARCHS, load_config
from moco_core.data.data import scan_images
from moco_core.data.device_data import DeviceAugmentLoader, EncodedImages, collate_encoded
from moco_core.model.methods import build_method
from moco_core.pretrain_config import PretrainConfig
from moco_core.run.engine import train_step
from moco_core.run.runtime import resolve_data
from moco_core.run.train import StepSchedule, build_optimizer

PRESETS = {"v2 resnet18": "embedded", "v3 resnet18": "mocov3_embedded", "v3 vit_nano_p4": "mocov3_vit_embedded"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10, help="timed steps of each preset in each round")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps before each round's timed ones")
    p.add_argument("--batches", type=int, default=4, help="distinct batches of views, used in turn")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--json", action="store_true", help="also print one JSON line with every figure")
    args = p.parse_args(argv)
    if min(args.rounds, args.steps, args.batches, args.threads) < 1 or args.warmup < 0:
        p.error("need --rounds, --steps, --batches, --threads >= 1 and --warmup >= 0")
    return args


def views(cfg: PretrainConfig, count: int) -> list[Any]:
    """``count`` batches of two views of the embedded images, made by the tensor pipeline on the CPU."""
    images = scan_images(resolve_data("embedded"), split="train")
    loader = DataLoader(EncodedImages(images.samples), batch_size=cfg.optim.batch_size, shuffle=True,
                        drop_last=True, collate_fn=collate_encoded)
    batches = []
    for batch in DeviceAugmentLoader(loader, cfg.augment, torch.device("cpu"), views=2):
        batches.append(batch)
        if len(batches) == count:
            return batches
    raise SystemExit(f"the embedded data gave only {len(batches)} batches")


class Runner:
    """One preset's model, optimizer and step, as a pretraining builds them."""

    def __init__(self, preset: str) -> None:
        self.cfg = load_config(PretrainConfig, preset, ["data.workers=0"])
        torch.manual_seed(0)
        self.method = build_method(self.cfg, world_size=1, num_classes=8, dataset_size=2000)
        self.method.module.train()
        self.optimizer = build_optimizer(self.method.module, self.cfg.optim, torch.device("cpu"),
                                         method=self.cfg.method, vit=self.cfg.model.arch in VIT_ARCHS)
        self.schedule = StepSchedule(self.cfg.optim, self.method, self.optimizer, epoch=1, steps_per_epoch=15) \
            if self.cfg.method == "mocov3" else None
        self.step_index = 0

    def step(self, batch: Any) -> None:
        if self.schedule is not None:
            self.schedule(self.step_index % 15)
        self.step_index += 1
        train_step(self.method.module, self.method, batch, self.optimizer, device=torch.device("cpu"), amp=False,
                   channels_last=False)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    runners = {name: Runner(preset) for name, preset in PRESETS.items()}
    sizes = {r.cfg.optim.batch_size for r in runners.values()}
    if len(sizes) != 1:
        raise SystemExit(f"the presets' batch sizes differ: {sizes}")
    batch_size = sizes.pop()
    batches = views(runners["v2 resnet18"].cfg, args.batches)
    rates: dict[str, list[float]] = {name: [] for name in runners}
    source = cycle(batches)
    for _ in range(args.rounds):
        for name, runner in runners.items():
            for _ in range(args.warmup):
                runner.step(next(source))
            start = time.perf_counter()
            for _ in range(args.steps):
                runner.step(next(source))
            rates[name].append(args.steps * batch_size / (time.perf_counter() - start))
    median = {name: statistics.median(r) for name, r in rates.items()}
    v2 = median["v2 resnet18"]
    print(f"torch {torch.__version__}, {args.threads} threads, batch {batch_size}, 32-px views of the "
          f"embedded data; median of {args.rounds} rounds of {args.steps} steps")
    for name, preset in PRESETS.items():
        spread = ", ".join(f"{r:.0f}" for r in rates[name])
        print(f"{name:<20} ({preset}): {median[name]:6.1f} images/s ({median[name] / v2:.2f}x v2; rounds: {spread})")
    result = {"threads": args.threads, "rounds": rates, "median": median,
              "ratio_to_v2": {n: m / v2 for n, m in median.items()}}
    if args.json:
        print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
