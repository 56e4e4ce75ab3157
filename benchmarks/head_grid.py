"""The cost of a grid of linear heads against one head, side by side in one run (``moco eval linear --grid``).

Two kinds of figure, both of the grid's own code (:mod:`classification.frozen.heads` on
:mod:`moco_core.model.taps`):

- ``step``: the training step alone on synthetic images already on the device: the frozen backbone's pass (no
  grad, bf16 autocast on CUDA), every head's logits, the summed loss, backward, SGD. With one head (the
  backbone's default feature, one lr) and with the grid (its taps x 13 lrs) on one backbone and batch: each
  first alone for ``--warmup`` untimed steps (with ``--compile``: the compilation, reported apart as
  ``compile_s``; on CUDA the peak memory of each), then ``--steps`` timed steps of each in turns, a
  synchronisation before each clock read; the median step of each.
- ``embedded``: the whole evaluation, ``moco eval linear -c lincls_grid_embedded`` (data loading, training, the
  held-out and val passes), with its 13 lrs and with its first lr alone, for ``--embedded-epochs`` epochs each.

On a CPU (the default; the 2-core figures of benchmarks/README.md):
    python benchmarks/head_grid.py
The GPU figures (ResNet-50 read at its 4 stages and ViT-B/16 at its 4 DINOv2 features, x 13 lrs: 52 heads each;
batch 1,024; ImageNet's 224-px crops and 1,000 classes):
    python benchmarks/head_grid.py --device cuda --gpu [--compile] [--channels-last]
A dry run in seconds (tests/benchmarks/test_head_grid.py): ``--tiny``. Prints one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torchvision

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from classification.frozen.heads import (  # noqa: E402
    DINOV2_LRS,
    HeadGrid,
    grid_specs,
    head_losses,
    head_optimizer,
    set_lr,
)
from moco_core.model.taps import RESNET_TAPS, VIT_TAPS, FeatureTaps, default_tap  # noqa: E402
from moco_core.run.runtime import autocast, resolve_device  # noqa: E402


def build_backbone(arch: str, image_size: int) -> torch.nn.Module:
    if arch.startswith("vit"):
        from moco_core.model.vit import build_vit

        return build_vit(arch, img_size=image_size)
    return getattr(torchvision.models, arch)()


class Trainer:
    """The grid's training step with ``taps`` x ``lrs`` heads on a shared frozen backbone and batch."""

    def __init__(self, model: torch.nn.Module, taps: tuple[str, ...], lrs: tuple[float, ...], *,
                 images: torch.Tensor, target: torch.Tensor, classes: int, total: int, compile_: bool) -> None:
        reader = FeatureTaps(model, taps)
        self.dims = reader.dims(images.shape[-1])
        self.features = torch.compile(reader) if compile_ else reader
        self.heads = HeadGrid(grid_specs(taps, lrs), self.dims, classes).to(images.device)
        self.optimizer = head_optimizer(self.heads, images.shape[0])
        self.images, self.target, self.total, self.done = images, target, total, 0
        self.taps, self.lrs = taps, lrs

    def step(self) -> None:
        set_lr(self.optimizer, self.done, self.total)
        with torch.no_grad(), autocast(self.images.device, True):
            out = {k: v.float() for k, v in self.features(self.images).items()}
        losses = head_losses(self.heads(out), self.target)
        self.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        self.optimizer.step()
        self.done += 1


def pair(arch: str, grid_taps: tuple[str, ...], args: argparse.Namespace, device: torch.device, *, batch: int,
         image_size: int, setting: str) -> dict[str, Any]:
    """One head (the default feature, one lr) and the grid (``grid_taps`` x DINOv2's 13 lrs) on the same frozen
    backbone and synthetic batch: each warmed up alone (its peak memory, its compilation), then timed step by step
    in turns, so that a machine shared with other work slows both alike; the medians of the turns."""
    torch.manual_seed(0)
    model = build_backbone(arch, image_size).to(device).eval().requires_grad_(False)
    memory = torch.channels_last if args.channels_last and not arch.startswith("vit") else torch.contiguous_format
    model = model.to(memory_format=memory)
    images = torch.randn(batch, 3, image_size, image_size, device=device).to(memory_format=memory)
    target = torch.randint(0, args.classes, (batch,), device=device)
    total = args.warmup + args.steps
    runs = {"one_head": ((default_tap(model),), (DINOV2_LRS[-1],)), "grid": (grid_taps, DINOV2_LRS)}
    trainers: dict[str, Trainer] = {}
    figures: dict[str, dict[str, Any]] = {}
    for name, (taps, lrs) in runs.items():  # one head first, measured before the grid's heads exist
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        _sync(device)
        started = time.perf_counter()
        trainer = trainers[name] = Trainer(model, taps, lrs, images=images, target=target, classes=args.classes,
                                           total=total, compile_=args.compile)
        for _ in range(args.warmup):
            trainer.step()
        _sync(device)
        figures[name] = {"arch": arch, "heads": len(trainer.heads.specs), "taps": list(trainer.taps),
                         "lrs": len(trainer.lrs), "batch": batch, "image_size": image_size, "classes": args.classes,
                         "steps": args.steps, "warmup_s": time.perf_counter() - started}
        if args.compile:
            figures[name]["compile_s"] = figures[name]["warmup_s"]  # the warm-up steps, compilation included
        if device.type == "cuda":
            figures[name]["peak_memory_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    times: dict[str, list[float]] = {name: [] for name in trainers}
    for _ in range(args.steps):
        for name, trainer in trainers.items():
            _sync(device)
            started = time.perf_counter()
            trainer.step()
            _sync(device)
            times[name].append(time.perf_counter() - started)
    for name, seconds in times.items():
        median = statistics.median(seconds)
        figures[name].update(step_ms=1000 * median, images_per_s=batch / median)
    return {"setting": setting, **figures,
            "time_ratio": figures["grid"]["step_ms"] / figures["one_head"]["step_ms"]}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def embedded(epochs: int, device: str, tiny: bool) -> dict[str, Any]:
    """The whole embedded evaluation of a random ResNet-18 with the preset's 13 lrs and with its first alone,
    wall-clock each. ``tiny``: on MOCO_SMOKE's shrunk data (4 images a class)."""
    import os

    from classification.frozen.grid import grid_eval
    from classification.frozen.grid_config import load_grid_config

    if tiny:
        os.environ["MOCO_SMOKE"] = "1"
    runs = {}
    with tempfile.TemporaryDirectory() as out:
        for name, lrs in (("one_head", ["grid.lrs=[0.01]"]), ("grid", [])):
            cfg = load_grid_config("lincls_grid_embedded", [f"optim.epochs={epochs}", f"run.output_dir={out}/{name}",
                                                             f"run.device={device}", "arch=resnet18", *lrs])
            started = time.perf_counter()
            record = json.loads(grid_eval(cfg, "random", show_progress=False).read_text())
            seconds = time.perf_counter() - started
            split = record["selection"]["split"]
            runs[name] = {"heads": len(record["grid"]), "wall_s": seconds, "epochs": cfg.optim.epochs,
                          "train_images": split["of"] - split["images"],
                          "images_per_s": (split["of"] - split["images"]) * cfg.optim.epochs / seconds}
    return {"setting": "embedded (lincls_grid_embedded, ResNet-18, the whole evaluation)", **runs,
            "time_ratio": runs["grid"]["wall_s"] / runs["one_head"]["wall_s"]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--gpu", action="store_true", help="the GPU figures: ResNet-50 and ViT-B/16, batch 1024, 52 heads")
    p.add_argument("--tiny", action="store_true", help="a dry run: ResNet-18 and a nano ViT at 32 px, batch 4")
    p.add_argument("--batch", type=int, default=None, help="the synthetic step's batch (default: 1024 with --gpu, "
                   "32 on CPU, 4 with --tiny)")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--steps", type=int, default=None, help="timed steps (default 20; CPU 5; --tiny 2)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 3; --tiny 1)")
    p.add_argument("--embedded-epochs", type=int, default=2)
    p.add_argument("--compile", action="store_true", help="torch.compile the backbone's feature pass")
    p.add_argument("--channels-last", action="store_true", help="a ResNet in channels_last")
    args = p.parse_args(argv)
    device = resolve_device(args.device)
    args.steps = args.steps or (2 if args.tiny else 20 if device.type == "cuda" else 5)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 3)
    settings = []
    if args.tiny:
        batch = args.batch or 4
        settings.append(pair("resnet18", RESNET_TAPS, args, device, batch=batch, image_size=32, setting="tiny"))
        settings.append(pair("vit_nano_p4", VIT_TAPS, args, device, batch=batch, image_size=32, setting="tiny"))
    elif args.gpu:
        batch = args.batch or 1024
        settings.append(pair("resnet50", RESNET_TAPS, args, device, batch=batch, image_size=224,
                             setting="ImageNet-shaped, 52 heads (4 stages x 13 lrs)"))
        settings.append(pair("vit_base", VIT_TAPS, args, device, batch=batch, image_size=224,
                             setting="ImageNet-shaped, 52 heads (4 DINOv2 features x 13 lrs)"))
    else:
        batch = args.batch or 32
        settings.append(pair("resnet50", ("layer4",), args, device, batch=batch, image_size=224,
                             setting="ImageNet-shaped, 13 heads (layer4 x 13 lrs)"))
    if not args.gpu:
        settings.append(embedded(1 if args.tiny else args.embedded_epochs, str(device), args.tiny))
    out = {"benchmark": "head_grid", "device": str(device), "torch": torch.__version__,
           "card": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
           "threads": torch.get_num_threads(), "compile": args.compile, "channels_last": args.channels_last,
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "settings": settings}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
