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
    """Load the run directory's last checkpoint into ``model`` and ``optimizer``; the iterations it had done.
    ``what`` names the model in errors ("detector", "segmentation network")."""
    saved = checkpoint.load(run_dir / checkpoint.LAST)
    if saved.get("format") != CHECKPOINT_FORMAT:
        raise checkpoint.CheckpointError(f"{run_dir / checkpoint.LAST}: not a transfer fine-tuning checkpoint")
    try:
        checkpoint.load_into(model, saved["model"])
    except checkpoint.CheckpointError as err:
        raise checkpoint.CheckpointError(f"{run_dir / checkpoint.LAST}: does not match the configured {what}: "
                                         f"{err}") from None
    optimizer.load_state_dict(saved["optimizer"])
    return int(saved["iteration"])


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
    loader = DataLoader(train_set, batch_size=local_batch, sampler=sampler, num_workers=cfg.data.workers,
                        collate_fn=collate, drop_last=True, pin_memory=device.type == "cuda",
                        persistent_workers=cfg.data.workers > 0)
    batches = engine.endless(loader, sampler, start)
    metrics = MetricsWriter(run_dir / "metrics.jsonl", enabled=main, loggers=cfg.run.loggers, config=to_dict(cfg))
    if main:
        write_run_files(run_dir, to_dict(cfg), {"weights": weights, "backbone_format": info.format, "engine":
                                                 "torchvision", "world_size": world, "device": str(device)})
        metrics.start(start)

    def save(done: int) -> None:
        if main:
            checkpoint.save_atomic({"iteration": done, "model": model.state_dict(), "optimizer":
                                    optimizer.state_dict(), "config": to_dict(cfg), "format": CHECKPOINT_FORMAT,
                                    "backbone": dataclasses.asdict(info)}, run_dir / checkpoint.LAST)

    progress = Progress(s.iterations, done_steps=start, every=cfg.run.log_every, enabled=main and show_progress)
    with metrics:  # the loggers are closed (flushed) at the end, and on an error
        history = engine.train(trained, optimizer, batches, solver=s, start=start, device=device, amp=cfg.run.amp,
                               metrics=metrics, progress=progress, log_every=cfg.run.log_every,
                               checkpoint_every=cfg.run.checkpoint_every, save=save, epoch_size=len(train_set))
    engine.precise_bn(trained, batches, s.precise_bn_iters, device=device, amp=cfg.run.amp)
    if s.precise_bn_iters:
        save(s.iterations)  # the tested weights: BN statistics recomputed
    return history
