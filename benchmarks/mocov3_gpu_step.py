"""MoCo v3 step on one GPU (images/s), ViT or ResNet: ours (bf16, torch.compile) beside the official recipe.

Ours is the step ``moco pretrain -c mocov3_vit_base_300ep`` runs on one CUDA GPU: ``build_method``,
``build_optimizer`` (fused AdamW), ``speed_up`` (``run.compile`` / ``run.channels_last``, on under CUDA),
``StepSchedule`` (the lr and m of the step) and the engine's ``train_step`` under bf16 autocast, attention through
``F.scaled_dot_product_attention`` (timm's fused attention; on CUDA restricted to the flash kernel with
``--attention flash``, so that a fallback fails loudly instead of timing another kernel). The reference is the
official moco-v3 recipe rebuilt in ``reference_v3.py`` (fp16 autocast, GradScaler, a Python loop for the momentum
update, ``loss.item()`` every step, torch's default AdamW, timm 0.4.9's written-out attention, nothing compiled)
on the same network with the same initial weights. ``--arch resnet50`` times the ResNet setup instead
(``mocov3_r50_100ep``: LARS, ours in channels_last, the official recipe NCHW; both step the same LARS loop).
Both train on the same synthetic views, already on the device
(the step alone, no data loading); ``--warmup`` untimed steps first (ours: the compilation), then ``--steps``
timed ones, with a synchronisation before each clock read. An image is one sample, seen as two views.

On a GPU (benchmarks/gpu_report.sh, stages mocov3_vit and mocov3_r50):
    python benchmarks/mocov3_gpu_step.py --arch vit_base --image-size 224 --batch 256 --json
    python benchmarks/mocov3_gpu_step.py --arch resnet50 --image-size 224 --batch 256 --json
Dry run on a CPU (seconds; fp32, no compilation, the same code path otherwise):
    python benchmarks/mocov3_gpu_step.py --arch vit_nano_p4 --image-size 32 --batch 8 --steps 2 --warmup 1 \\
        --mlp-dim 64 --device cpu --no-compile
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import torch
from reference_v3 import ReferenceMoCoV3, reference_step, unfused_attention  # beside this script

from moco_core.config import ARCHS, VIT_ARCHS, load_config, replace
from moco_core.model.methods import build_method
from moco_core.model.optimizers import LARS
from moco_core.pretrain_config import PretrainConfig
from moco_core.run.engine import train_step
from moco_core.run.runtime import resolve_device
from moco_core.run.train import StepSchedule, build_optimizer, learning_rate, speed_up

PRESET = "mocov3_vit_base_300ep"  # the official ViT-B/16 setup: AdamW 1.5e-4 per 256, wd 0.1, T 0.2, m 0.99
RESNET_PRESET = "mocov3_r50_100ep"  # the official ResNet-50 setup: LARS 0.6 per 256, wd 1e-6, T 1.0, m 0.99
STEPS_PER_EPOCH = 1251  # ImageNet's 1,281,167 images at batch 1024: where in the schedule the steps fall


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="vit_base", choices=VIT_ARCHS + ARCHS)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--mlp-dim", type=int, default=None, help="the heads' hidden width (default: the preset's 4096)")
    p.add_argument("--steps", type=int, default=20, help="timed steps of each")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (ours: the compilation)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile our encoders (default: under CUDA, as run.compile)")
    p.add_argument("--attention", choices=("flash", "auto"), default="flash",
                   help="ours on CUDA: only the flash kernel of scaled_dot_product_attention, or torch's choice")
    p.add_argument("--reference", action=argparse.BooleanOptionalAction, default=True,
                   help="also time the official recipe")
    p.add_argument("--json", action="store_true", help="print one JSON line with every figure last")
    args = p.parse_args(argv)
    if min(args.batch, args.steps, args.image_size) < 2 or args.warmup < 0:
        p.error("need --batch, --steps, --image-size >= 2 (BN over the batch) and --warmup >= 0")
    return args


def timed(step: Callable[[int], None], warmup: int, steps: int, device: torch.device) -> tuple[float, float]:
    """Run ``warmup`` then ``steps`` calls of ``step(i)``; returns (warm-up seconds, timed seconds)."""
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    start = time.perf_counter()
    for i in range(warmup):
        step(i)
    sync()
    middle = time.perf_counter()
    for i in range(warmup, warmup + steps):
        step(i)
    sync()
    return middle - start, time.perf_counter() - middle


def peak_memory_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def ours(cfg: PretrainConfig, views: list[tuple[torch.Tensor, torch.Tensor]], args: argparse.Namespace,
         device: torch.device) -> dict[str, Any]:
    method = build_method(cfg, world_size=1, num_classes=0, dataset_size=0)
    method.module.to(device).train()
    vit = cfg.model.arch in VIT_ARCHS
    optimizer = build_optimizer(method.module, cfg.optim, device, method="mocov3", vit=vit)
    speed = speed_up(method, device, cfg.run)
    schedule = StepSchedule(cfg.optim, method, optimizer, epoch=0, steps_per_epoch=STEPS_PER_EPOCH)
    sdpa = [m for m in method.module.modules() if getattr(m, "fused_attn", False)]
    empty = torch.zeros(args.batch, dtype=torch.long)

    def step(i: int) -> None:
        schedule(i)
        train_step(method.module, method, (views[i % len(views)], empty, empty), optimizer, device=device,
                   amp=True, channels_last=speed.channels_last)

    flash = vit and device.type == "cuda" and args.attention == "flash"
    if flash:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]) if flash else contextlib.nullcontext():
        warm, spent = timed(step, args.warmup, args.steps, device)
    return {"images_per_s": args.steps * args.batch / spent, "ms_per_step": 1000 * spent / args.steps,
            "warmup_s": warm, "peak_memory_gib": peak_memory_gib(device), "compiled": speed.compiled,
            "channels_last": speed.channels_last, "precision": "bf16" if device.type == "cuda" else "fp32",
            "sdpa_blocks": len(sdpa),
            "attention": ("flash only" if flash else "scaled_dot_product_attention") if vit else None}


def reference(cfg: PretrainConfig, views: list[tuple[torch.Tensor, torch.Tensor]], args: argparse.Namespace,
              device: torch.device) -> dict[str, Any]:
    torch.manual_seed(0)  # the same initial weights as ours
    built = build_method(cfg, world_size=1, num_classes=0, dataset_size=0).module
    model = ReferenceMoCoV3(built.encoder, built.momentum_encoder, built.predictor,
                            temperature=cfg.v3.temperature).to(device).train()
    unfused = unfused_attention(model)
    lr0, wd = learning_rate(cfg.optim, 0), cfg.optim.weight_decay
    optimizer = (torch.optim.AdamW(model.parameters(), lr0, weight_decay=wd) if cfg.model.arch in VIT_ARCHS
                 else LARS(model.parameters(), lr0, weight_decay=wd, momentum=cfg.optim.momentum))
    scaler = torch.amp.GradScaler(device.type, enabled=device.type == "cuda")
    probe = StepSchedule(cfg.optim, _MomentumProbe(cfg), optimizer, epoch=0, steps_per_epoch=STEPS_PER_EPOCH)

    def step(i: int) -> None:
        lr = probe(i)  # the same lr and m as ours at step i, computed in Python as the official code does
        reference_step(model, optimizer, scaler, *views[i % len(views)], lr=lr, m=probe.method.m)

    warm, spent = timed(step, args.warmup, args.steps, device)
    return {"images_per_s": args.steps * args.batch / spent, "ms_per_step": 1000 * spent / args.steps,
            "warmup_s": warm, "peak_memory_gib": peak_memory_gib(device), "compiled": False,
            "precision": "fp16 + GradScaler" if device.type == "cuda" else "fp32", "unfused_attention_blocks": unfused}


class _MomentumProbe:
    """Receives the schedule's m for the reference (StepSchedule calls ``schedule(progress)`` on a method)."""

    def __init__(self, cfg: PretrainConfig) -> None:
        from moco_core.model.mocov3 import momentum_at

        self.cfg, self.at, self.m = cfg, momentum_at, cfg.v3.momentum

    def schedule(self, progress: float) -> None:
        self.m = self.at(self.cfg.v3.momentum, progress) if self.cfg.v3.momentum_cos else self.cfg.v3.momentum


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    device = resolve_device(args.device)
    preset = PRESET if args.arch in VIT_ARCHS else RESNET_PRESET
    cfg = load_config(PretrainConfig, preset, [f"model.arch={args.arch}", f"augment.crop_size={args.image_size}",
                                               f"optim.batch_size={args.batch}", "data.path=synthetic",
                                               "model.shuffle_bn=none",  # one process: its own BN, as sync's
                                               *([f"v3.mlp_dim={args.mlp_dim}"] if args.mlp_dim else [])])
    cfg = replace(cfg, run={"compile": args.compile, "device": str(device)})
    generator = torch.Generator().manual_seed(0)
    views = [tuple(torch.randn(args.batch, 3, args.image_size, args.image_size, generator=generator).to(device)
                   for _ in range(2)) for _ in range(2)]
    result: dict[str, Any] = {"arch": args.arch, "image_size": args.image_size, "batch": args.batch,
                              "steps": args.steps, "warmup": args.warmup, "device": str(device),
                              "machine": {"torch": torch.__version__, "cpu": platform.processor() or platform.machine(),
                                          "cpu_count": os.cpu_count(), "cuda_device": torch.cuda.get_device_name(device)
                                          if device.type == "cuda" else None}}
    torch.manual_seed(0)
    result["ours"] = ours(cfg, views, args, device)
    shown = result["ours"]["attention"] or f"channels_last {result['ours']['channels_last']}"
    print(f"ours ({args.arch}, {result['ours']['precision']}, compiled {result['ours']['compiled']}, {shown}): "
          f"{result['ours']['images_per_s']:.1f} images/s", flush=True)
    if args.reference:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        result["reference"] = reference(copy.deepcopy(cfg), views, args, device)
        result["ratio"] = result["ours"]["images_per_s"] / result["reference"]["images_per_s"]
        print(f"official recipe ({result['reference']['precision']}, eager): "
              f"{result['reference']['images_per_s']:.1f} images/s; ours / official {result['ratio']:.2f}x "
              f"(target >= 1.5x)", flush=True)
    if args.json:
        print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
