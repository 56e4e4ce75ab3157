"""The fine-tuning engine every torchvision-engine transfer task shares (detection, semantic segmentation).

A task builds its model and training set, calls :func:`fine_tune`, then tests with :func:`predict`.
:func:`fine_tune` sets up what every task's run needs (SyncBN across processes, CUDA or CPU; the optimizer; resuming
from the run directory's last checkpoint; DistributedDataParallel; the run files and metrics) and runs ``train``,
the iteration loop (detectron2's schedule: linear warm-up, then x gamma at the steps) over a model that returns its
losses as a dict in training mode, on ``endless``, the resumable stream of batches, with its checkpoints; then
``precise_bn`` recomputes BN statistics before testing. ``predict`` runs the test split and turns each image's
output into evaluation records at once (for detection, masks become RLE immediately: full-image probability maps do
not pile up). The config read is any task's (``TransferConfig``, ``SemsegConfig``): ``solver``
(:class:`transfer.config.SolverConfig`), ``run`` (:class:`transfer.config.TransferRunConfig`) and ``data.workers``.
The task families' own data and converters are in their rooms (:mod:`transfer.detection.data`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageOps
from torch import nn
from torch.utils.data import DataLoader, Dataset

from moco_core import checkpoint, distributed
from moco_core.config import to_dict
from moco_core.errors import NonFiniteLossError
from moco_core.model.backbone import BackboneInfo
from moco_core.model.batchnorm import sync_batchnorm_for
from moco_core.optimizer_state import load_optimizer_state
from moco_core.run.preemption import ResumableSampler
from moco_core.run.progress import MetricsWriter, Progress
from moco_core.run.rundir import write_run_files
from moco_core.run.runtime import autocast
from transfer.config import SolverConfig, per_process_batch

Batch = tuple[list[torch.Tensor], list[dict[str, torch.Tensor]], list[int]]


def read_rgb(path: str) -> torch.Tensor:
    """(3, H, W) float RGB in [0, 1], EXIF orientation applied."""
    with Image.open(path) as image:
        array = np.asarray(ImageOps.exif_transpose(image).convert("RGB"))
    return torch.from_numpy(array.copy()).permute(2, 0, 1).float().div_(255)


def collate(samples: list[tuple[torch.Tensor, dict[str, torch.Tensor], int]]) -> Batch:
    images, targets, indices = zip(*samples, strict=True)
    return list(images), list(targets), list(indices)


def endless(loader: DataLoader, sampler: ResumableSampler, start: int = 0) -> Iterator[Batch]:
    """Batches forever, reshuffled every pass (the training is counted in iterations, not epochs), beginning at
    iteration ``start``: a resumed run sees the batches an uninterrupted one would, in the same order (the pass
    it was in, from the batch it had reached; ``loader`` drops the last partial batch of each pass). A pass's length
    may vary with its epoch (repeat-factor sampling), so the passes before ``start`` are counted one by one."""
    epoch, skip = 0, start
    sampler.start = 0
    while True:
        sampler.set_epoch(epoch)
        per_pass = len(sampler) // loader.batch_size
        if skip < per_pass:
            break
        epoch, skip = epoch + 1, skip - per_pass
    while True:
        sampler.set_epoch(epoch)
        sampler.start = skip * loader.batch_size  # read when the pass's iterator is made
        if loader.generator is not None:  # the workers' seeds a function of the pass, resumed or not
            loader.generator.manual_seed(getattr(sampler, "seed", 0) + epoch)
        yield from loader
        sampler.start, skip, epoch = 0, 0, epoch + 1


def learning_rate(cfg: SolverConfig, iteration: int) -> float:
    """lr at ``iteration`` (0-based): lr * batch/16, linear warm-up from warmup_factor, x gamma at each step."""
    factor = 1.0
    if iteration < cfg.warmup_iters:
        alpha = iteration / cfg.warmup_iters
        factor = cfg.warmup_factor * (1 - alpha) + alpha
    return cfg.lr * cfg.batch_size / 16 * factor * cfg.gamma ** sum(iteration >= s for s in cfg.steps)


def build_optimizer(model: nn.Module, cfg: SolverConfig) -> torch.optim.SGD:
    """SGD with momentum; BN weights and biases get ``weight_decay_norm`` (detectron2's parameter groups)."""
    norm: list[nn.Parameter] = []
    other: list[nn.Parameter] = []
    seen: set[int] = set()
    for module in model.modules():
        for param in module.parameters(recurse=False):
            if param.requires_grad and id(param) not in seen:
                seen.add(id(param))
                (norm if isinstance(module, nn.modules.batchnorm._BatchNorm) else other).append(param)
    return torch.optim.SGD([{"params": other, "weight_decay": cfg.weight_decay},
                            {"params": norm, "weight_decay": cfg.weight_decay_norm}],
                           lr=learning_rate(cfg, 0), momentum=cfg.momentum)


def to_device(batch: Batch, device: torch.device) -> tuple[list[torch.Tensor], list[dict[str, torch.Tensor]]]:
    images, targets, _ = batch
    return ([image.to(device, non_blocking=True) for image in images],
            [{k: v.to(device, non_blocking=True) for k, v in t.items()} for t in targets])


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch, *, lr: float,
               device: torch.device, amp: bool) -> dict[str, torch.Tensor]:
    """One SGD iteration; returns the detached losses (``loss`` is their sum)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    images, targets = to_device(batch, device)
    with autocast(device, amp):
        losses = model(images, targets)
    total = sum(losses.values())
    optimizer.zero_grad(set_to_none=True)
    total.backward()
    optimizer.step()
    return {"loss": total.detach(), **{k: v.detach() for k, v in losses.items()}}


def train(model: nn.Module, optimizer: torch.optim.Optimizer, batches: Iterator[Batch], *, solver: SolverConfig,
          start: int, device: torch.device, amp: bool, metrics: MetricsWriter, progress: Progress, log_every: int,
          checkpoint_every: int, save: Callable[[int], None], epoch_size: int) -> list[dict[str, float]]:
    """Iterations ``start`` .. ``solver.iterations``; ``save(done)`` every ``checkpoint_every`` and at the end.

    Every ``log_every`` iterations the losses (averaged over processes) go to metrics.jsonl and the history
    returned. A NaN or infinite loss stops the run (NonFiniteLossError) before the next step.
    """
    model.train()
    history: list[dict[str, float]] = []
    epochs = math.ceil(solver.iterations * solver.batch_size / epoch_size)  # passes over the training set
    timer, last_logged = time.perf_counter(), start
    for iteration in range(start, solver.iterations):
        lr = learning_rate(solver, iteration)
        losses = train_step(model, optimizer, next(batches), lr=lr, device=device, amp=amp)
        loss = losses["loss"].item()
        if not math.isfinite(loss):
            raise NonFiniteLossError(f"the loss is {loss} at iteration {iteration + 1} "
                                     f"({', '.join(f'{k} {v.item():.4g}' for k, v in losses.items())}); "
                                     f"lower solver.lr or lengthen solver.warmup_iters")
        done, epoch = iteration + 1, iteration * solver.batch_size // epoch_size
        progress.update(done, epoch, epochs, loss=loss, lr=lr)
        if done % log_every == 0 or done == solver.iterations:
            values = {k: distributed.all_reduce_mean(v).item() for k, v in losses.items()}
            seconds = (time.perf_counter() - timer) / (done - last_logged)
            timer, last_logged = time.perf_counter(), done
            history.append({"iteration": done, "epoch": epoch, **values, "lr": lr, "s_per_iter": seconds})
            metrics.write(step=done, epoch=epoch, **values, lr=lr, s_per_iter=seconds)
        if done % checkpoint_every == 0 or done == solver.iterations:
            save(done)
    return history


@torch.no_grad()
def precise_bn(model: nn.Module, batches: Iterator[Batch], iterations: int, *, device: torch.device,
               amp: bool) -> None:
    """Recompute every BN layer's running mean and variance as the plain average over ``iterations`` training
    batches, the model in training mode (detectron2's PreciseBN). Nothing else changes."""
    layers = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if not iterations or not layers:
        return
    momenta = [layer.momentum for layer in layers]
    for layer in layers:
        layer.reset_running_stats()
        layer.momentum = None  # cumulative average: every batch weighs the same
    model.train()
    for _ in range(iterations):
        images, targets = to_device(next(batches), device)
        with autocast(device, amp):
            model(images, targets)
    for layer, momentum in zip(layers, momenta, strict=True):
        layer.momentum = momentum


@torch.no_grad()
def predict(model: nn.Module, dataset: Dataset, convert: Callable[[int, dict[str, torch.Tensor]], list],
            *, device: torch.device, amp: bool, batch_size: int, workers: int, progress: Progress) -> list:
    """``convert(index, output)`` of every test image, gathered from all processes (on every rank).

    Each process predicts a disjoint shard (every world-th image); ``output`` is torchvision's per-image dict
    (boxes in the original image's pixels, labels 1..K, scores, masks (n, 1, H, W) probabilities) on the CPU.
    """
    model.eval()
    shard = torch.utils.data.Subset(dataset, range(distributed.rank(), len(dataset), distributed.world_size()))
    loader = DataLoader(shard, batch_size=batch_size, num_workers=workers, collate_fn=collate)
    records: list = []
    for step, (images, _, indices) in enumerate(loader, 1):
        with autocast(device, amp):
            outputs = model([image.to(device, non_blocking=True) for image in images])
        for index, output in zip(indices, outputs, strict=True):
            records += convert(index, {k: v.float().cpu() for k, v in output.items()})
        progress.update(step, 0, 1, images=step * batch_size)
    if distributed.world_size() > 1:
        parts: list[list] = [[] for _ in range(distributed.world_size())]
        torch.distributed.all_gather_object(parts, records)
        records = [r for part in parts for r in part]
    return records


CHECKPOINT_FORMAT = "moco-transfer"


def sync_batchnorm(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` with BN synchronised across processes when several run (the paper's SyncBN): torch's
    SyncBatchNorm on CUDA, :class:`moco_core.model.batchnorm.CpuSyncBatchNorm` on CPU processes (torch's refuses
    them); in one process, ``model`` as it is."""
    if distributed.world_size() > 1:
        return sync_batchnorm_for(nn.SyncBatchNorm.convert_sync_batchnorm(model), device)
    return model


def resume_from(run_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer, what: str) -> int:
    """Load the run directory's last checkpoint into ``model`` and ``optimizer``, and set the RNG states it saved
    (the random scales, crops and flips continue as they would have); the iterations it had done. ``what`` names
    the model in errors ("detector", "segmentation network"). What does not fit is one line before any step."""
    path = run_dir / checkpoint.LAST
    saved = checkpoint.load(path)
    if saved.get("format") != CHECKPOINT_FORMAT:
        raise checkpoint.CheckpointError(f"{path}: not a transfer fine-tuning checkpoint")
    try:
        checkpoint.load_into(model, saved.get("model"))
    except checkpoint.CheckpointError as err:
        raise checkpoint.CheckpointError(f"{path}: does not match the configured {what}: {err}") from None
    load_optimizer_state(optimizer, saved.get("optimizer"), source=str(path), modules=[model])
    return checkpoint.restore_resume_fields(saved, path, position="iteration")[0]


def fine_tune(cfg: Any, model: nn.Module, train_set: Dataset, *, weights: str, info: BackboneInfo, run_dir: Path,
              device: torch.device, resume: bool, show_progress: bool | str, what: str,
              collate: Callable[[list], Any] = collate, sampler: ResumableSampler | None = None,
              ) -> list[dict[str, float]]:
    """Train ``model`` (on ``device``, SyncBN already applied) for ``cfg.solver.iterations`` from iteration 0, or
    from the last checkpoint with ``resume``; recompute BN statistics (``solver.precise_bn_iters``); the logged
    history. ``train_set`` items are what ``collate`` batches for ``model(images, targets)`` (losses dict).
    ``sampler``: the training order (LVIS: repeat-factor sampling); by default every item once a pass, shuffled."""
    s, main, world = cfg.solver, distributed.is_main(), distributed.world_size()
    local_batch = per_process_batch(cfg, world)
    optimizer = build_optimizer(model, s)
    start = resume_from(run_dir, model, optimizer, what) if resume else 0
    trained: nn.Module = model
    if world > 1:
        trained = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                                      else None)
    if sampler is None:
        sampler = ResumableSampler(train_set, num_replicas=world, rank=distributed.rank(), shuffle=True,
                                   seed=cfg.run.seed, drop_last=True)
    # The loader's own generator (seeded per pass by endless) draws the workers' base seed: the global RNG,
    # which the augmentations use and the checkpoint saves, is then touched by nothing but the data itself.
    loader = DataLoader(train_set, batch_size=local_batch, sampler=sampler, num_workers=cfg.data.workers,
                        collate_fn=collate, drop_last=True, pin_memory=device.type == "cuda",
                        persistent_workers=cfg.data.workers > 0, generator=torch.Generator())
    batches = endless(loader, sampler, start)
    metrics = MetricsWriter(run_dir / "metrics.jsonl", enabled=main, loggers=cfg.run.loggers, config=to_dict(cfg),
                            quiet=not show_progress)
    if main:
        write_run_files(run_dir, to_dict(cfg), {"weights": weights, "backbone_format": info.format, "engine":
                                                 "torchvision", "world_size": world, "device": str(device)})
        metrics.start(start)

    def save(done: int) -> None:
        if main:  # the RNG states after iteration ``done``: what the next batch's augmentation draws from
            checkpoint.save_last({"iteration": done, "model": model.state_dict(), "optimizer":
                                    optimizer.state_dict(), "config": to_dict(cfg), "format": CHECKPOINT_FORMAT,
                                    "backbone": dataclasses.asdict(info), "rng": checkpoint.rng_state()},
                                   run_dir / checkpoint.LAST)

    progress = Progress(s.iterations, done_steps=start, every=cfg.run.log_every, enabled=main and show_progress)
    with metrics:  # the loggers are closed (flushed) at the end, and on an error
        history = train(trained, optimizer, batches, solver=s, start=start, device=device, amp=cfg.run.amp,
                               metrics=metrics, progress=progress, log_every=cfg.run.log_every,
                               checkpoint_every=cfg.run.checkpoint_every, save=save, epoch_size=len(train_set))
    precise_bn(trained, batches, s.precise_bn_iters, device=device, amp=cfg.run.amp)
    if s.precise_bn_iters:
        save(s.iterations)  # the tested weights: BN statistics recomputed
    return history
