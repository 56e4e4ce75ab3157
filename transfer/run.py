"""``moco eval voc|coco|lvis|cityscapes`` as plain functions: weights -> dataset -> detector -> fine-tuning ->
test -> result record.

The engine is detectron2 when it is installed (``transfer.detection.detectron2_engine``, imported lazily) and
torchvision's detection models otherwise; both run the same protocol and the record names the one that ran. The
detectron2 engine provides ``evaluate(cfg, weights, *, show_progress, extra, resume) -> Path`` (the record it wrote,
with ``engine: "detectron2"``), reading the same TransferConfig.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import time
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import nn
from torch.utils.data import DataLoader

from moco_core import checkpoint, distributed
from moco_core.config import ConfigError, to_dict
from moco_core.run.preemption import ResumableSampler
from moco_core.run.progress import MetricsWriter, Progress
from moco_core.run.rundir import require_fresh, run_dir_lock, write_run_files
from moco_core.run.runtime import resolve_device
from transfer import engine
from transfer.config import TransferConfig, per_process_batch, transfer_run_dir
from transfer.detection import data as detection_data
from transfer.detection.datasets import DetectionData, load_data, require_a_batch
from transfer.detection.models import build_detector, load_resnet
from transfer.detection.sampling import RepeatFactorSampler, repeat_factors
from transfer.records import write_transfer_record


def resolve_engine(name: str) -> str:
    """"auto" is detectron2 when both it and our detectron2 engine can be imported, else torchvision."""
    has_detectron2 = importlib.util.find_spec("detectron2") is not None
    if name == "auto":
        ours = importlib.util.find_spec("transfer.detection.detectron2_engine") is not None
        return "detectron2" if has_detectron2 and ours else "torchvision"
    if name == "detectron2" and not has_detectron2:
        raise ConfigError("engine: detectron2 is not installed (it is on no package registry: install it from its "
                          "source), or use --engine torchvision")
    return name


def eval_voc(cfg: TransferConfig, weights: str, *, show_progress: bool | str = True,
             extra: dict[str, Any] | None = None, resume: bool = False) -> Path:
    """Faster R-CNN on VOC fine-tuned from ``weights`` (a checkpoint path or "random"); the record's path."""
    if cfg.task != "voc":
        raise ConfigError(f"task: eval_voc needs a voc config, got {cfg.task}")
    return evaluate(cfg, weights, show_progress=show_progress, extra=extra, resume=resume)


def eval_coco(cfg: TransferConfig, weights: str, *, show_progress: bool | str = True,
              extra: dict[str, Any] | None = None, resume: bool = False) -> Path:
    """Mask R-CNN on COCO fine-tuned from ``weights`` (a checkpoint path or "random"); the record's path."""
    if cfg.task != "coco":
        raise ConfigError(f"task: eval_coco needs a coco config, got {cfg.task}")
    return evaluate(cfg, weights, show_progress=show_progress, extra=extra, resume=resume)


def evaluate(cfg: TransferConfig, weights: str, *, show_progress: bool | str = True,
             extra: dict[str, Any] | None = None, resume: bool = False) -> Path:
    """The protocol for ``cfg.task`` on the engine ``cfg.engine`` resolves to; returns the result record's path.

    ``extra``: more top-level record fields. ``resume``: continue from the run directory's last checkpoint.
    """
    chosen = resolve_engine(cfg.engine)
    cfg = dataclasses.replace(cfg, engine=chosen)
    if chosen == "detectron2":
        try:
            from transfer.detection import detectron2_engine
        except ImportError as err:
            raise ConfigError(f"engine: detectron2 is installed but its engine cannot be loaded ({err}); use "
                              f"--engine torchvision") from None
        return detectron2_engine.evaluate(cfg, weights, show_progress=show_progress, extra=extra or {},
                                          resume=resume)
    device = resolve_device(cfg.run.device)
    with distributed.process_group(device), run_dir_lock(transfer_run_dir(cfg), device):
        return _torchvision_run(cfg, weights, device, show_progress, extra or {}, resume)


def build_model(cfg: TransferConfig, resnet: torchvision.models.ResNet, num_classes: int,
                device: torch.device) -> nn.Module:
    """The detector on ``device``; BN becomes SyncBatchNorm when several CUDA processes run (the paper's SyncBN)."""
    model = build_detector(cfg, resnet, num_classes).to(device)
    # Deviation from the paper: SyncBatchNorm is CUDA-only, so CPU processes keep per-process BN statistics.
    if distributed.world_size() > 1 and device.type == "cuda":
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return model


def _torchvision_run(cfg: TransferConfig, weights: str, device: torch.device, show_progress: bool | str,
                     extra: dict[str, Any], resume: bool) -> Path:
    main, world, started = distributed.is_main(), distributed.world_size(), time.perf_counter()
    s = cfg.solver
    local_batch = per_process_batch(cfg, world)
    run_dir = transfer_run_dir(cfg)
    if not resume:
        require_fresh(run_dir, (checkpoint.LAST,), "a fine-tuning", "pass --resume to continue it, or choose "
                      "another --output-dir")
    torch.manual_seed(cfg.run.seed)
    resnet, info = load_resnet(weights, cfg.detector.arch)  # before the data: a bad file fails at once
    data = load_data(cfg)
    require_a_batch(cfg, data, local_batch)
    model = build_model(cfg, resnet, len(data.class_names), device)
    optimizer = engine.build_optimizer(model, s)
    start = _resume(run_dir, model, optimizer) if resume else 0
    trained: nn.Module = model
    if world > 1:
        trained = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                                      else None)
    train_set = detection_data.DetectionDataset(data.train, train=True, flip_prob=cfg.input.flip_prob,
                                        masks=cfg.detector.mask)
    sampler: ResumableSampler
    if cfg.data.repeat_threshold > 0:  # LVIS: images of rare categories repeated (transfer/detection/sampling.py)
        sampler = RepeatFactorSampler(repeat_factors(data.train, cfg.data.repeat_threshold), num_replicas=world,
                                      rank=distributed.rank(), seed=cfg.run.seed)
    else:
        sampler = ResumableSampler(train_set, num_replicas=world, rank=distributed.rank(), shuffle=True,
                                   seed=cfg.run.seed, drop_last=True)
    loader = DataLoader(train_set, batch_size=local_batch, sampler=sampler, num_workers=cfg.data.workers,
                        collate_fn=engine.collate, drop_last=True, pin_memory=device.type == "cuda",
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
                                    optimizer.state_dict(), "config": to_dict(cfg), "format": "moco-transfer",
                                    "backbone": dataclasses.asdict(info)}, run_dir / checkpoint.LAST)

    progress = Progress(s.iterations, done_steps=start, every=cfg.run.log_every, enabled=main and show_progress)
    with metrics:  # the loggers are closed (flushed) at the end, and on an error
        history = engine.train(trained, optimizer, batches, solver=s, start=start, device=device, amp=cfg.run.amp,
                               metrics=metrics, progress=progress, log_every=cfg.run.log_every,
                               checkpoint_every=cfg.run.checkpoint_every, save=save, epoch_size=len(train_set))
    engine.precise_bn(trained, batches, s.precise_bn_iters, device=device, amp=cfg.run.amp)
    if s.precise_bn_iters:
        save(s.iterations)  # the tested weights: BN statistics recomputed
    train_time = time.perf_counter() - started
    test_progress = Progress(-(-len(data.test) // (cfg.run.test_batch_size * world)), every=cfg.run.log_every * 5,
                             enabled=main and show_progress)
    results = _test(cfg, model, data, device, test_progress)
    if not main:
        return run_dir / "result.json"
    return write_transfer_record(run_dir, cfg, data, info, results, history, engine="torchvision",
                                 details={"world_size": world, "device": str(device)}, started=started,
                                 train_time=train_time, extra=extra)


def _resume(run_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Load the run directory's last checkpoint into ``model`` and ``optimizer``; the iterations it had done."""
    saved = checkpoint.load(run_dir / checkpoint.LAST)
    if saved.get("format") != "moco-transfer":
        raise checkpoint.CheckpointError(f"{run_dir / checkpoint.LAST}: not a detection fine-tuning checkpoint")
    try:
        checkpoint.load_into(model, saved["model"])
    except checkpoint.CheckpointError as err:
        raise checkpoint.CheckpointError(f"{run_dir / checkpoint.LAST}: does not match the configured detector: "
                                         f"{err}") from None
    optimizer.load_state_dict(saved["optimizer"])
    return int(saved["iteration"])


def _test(cfg: TransferConfig, model: nn.Module, data: DetectionData, device: torch.device,
          progress: Progress) -> dict[str, Any]:
    """Predict the test split and score it: VOC AP50/AP/AP75 (+ per class); COCO, LVIS and Cityscapes box and mask
    AP (percent) by their official evaluators."""
    test_set = detection_data.DetectionDataset(data.test, train=False)
    kwargs = dict(device=device, amp=cfg.run.amp, batch_size=cfg.run.test_batch_size, workers=cfg.data.workers,
                  progress=progress)
    from transfer.detection.metrics import score

    convert = (detection_data.voc_detections(data.test) if cfg.task == "voc" else
               detection_data.coco_results(data.test, data.contiguous_to_original, masks=cfg.detector.mask))
    found = engine.predict(model, test_set, convert, **kwargs)
    return score(cfg.task, found, data, masks=cfg.detector.mask) if distributed.is_main() else {}
