"""The fine-tuning every torchvision-engine transfer task shares (detection, semantic segmentation): SyncBN across
processes (CUDA or CPU), the optimizer, resuming from the run directory's last checkpoint, DistributedDataParallel, the
resumable endless loader, the run files and metrics, the iteration loop of :mod:`transfer.engine` with its
checkpoints, and precise BN. A task builds its model and training set, calls :func:`fine_tune`, then tests.

The config it reads is any task's (``TransferConfig``, ``SemsegConfig``): ``solver`` (:class:`transfer.config.
SolverConfig`), ``run`` (:class:`transfer.config.TransferRunConfig`) and ``data.workers``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from moco_core import checkpoint, distributed
from moco_core.config import to_dict
from moco_core.model.backbone import BackboneInfo
from moco_core.model.batchnorm import sync_batchnorm_for
from moco_core.optimizer_state import load_optimizer_state
from moco_core.run.preemption import ResumableSampler
from moco_core.run.progress import MetricsWriter, Progress
from moco_core.run.rundir import write_run_files
from transfer import engine
from transfer.config import per_process_batch

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
              collate: Callable[[list], Any] = engine.collate, sampler: ResumableSampler | None = None,
              ) -> list[dict[str, float]]:
    """Train ``model`` (on ``device``, SyncBN already applied) for ``cfg.solver.iterations`` from iteration 0, or
    from the last checkpoint with ``resume``; recompute BN statistics (``solver.precise_bn_iters``); the logged
    history. ``train_set`` items are what ``collate`` batches for ``model(images, targets)`` (losses dict).
    ``sampler``: the training order (LVIS: repeat-factor sampling); by default every item once a pass, shuffled."""
    s, main, world = cfg.solver, distributed.is_main(), distributed.world_size()
    local_batch = per_process_batch(cfg, world)
    optimizer = engine.build_optimizer(model, s)
    start = resume_from(run_dir, model, optimizer, what) if resume else 0
    trained: nn.Module = model
    if world > 1:
        trained = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                                      else None)
    if sampler is None:
        sampler = ResumableSampler(train_set, num_replicas=world, rank=distributed.rank(), shuffle=True,
                                   seed=cfg.run.seed, drop_last=True)
    # The loader's own generator (seeded per pass by engine.endless) draws the workers' base seed: the global RNG,
    # which the augmentations use and the checkpoint saves, is then touched by nothing but the data itself.
    loader = DataLoader(train_set, batch_size=local_batch, sampler=sampler, num_workers=cfg.data.workers,
                        collate_fn=collate, drop_last=True, pin_memory=device.type == "cuda",
                        persistent_workers=cfg.data.workers > 0, generator=torch.Generator())
    batches = engine.endless(loader, sampler, start)
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
        history = engine.train(trained, optimizer, batches, solver=s, start=start, device=device, amp=cfg.run.amp,
                               metrics=metrics, progress=progress, log_every=cfg.run.log_every,
                               checkpoint_every=cfg.run.checkpoint_every, save=save, epoch_size=len(train_set))
    engine.precise_bn(trained, batches, s.precise_bn_iters, device=device, amp=cfg.run.amp)
    if s.precise_bn_iters:
        save(s.iterations)  # the tested weights: BN statistics recomputed
    return history
