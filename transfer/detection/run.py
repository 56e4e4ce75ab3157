"""``moco eval voc|coco|keypoints|lvis|cityscapes|densepose`` as plain functions: weights -> dataset -> detector ->
fine-tuning -> test -> result record.

The engine is detectron2 when it is installed (``transfer.detection.detectron2_engine``, imported lazily) and
torchvision's detection models otherwise; both run the same protocol and the record names the one that ran. The
detectron2 engine provides ``evaluate(cfg, weights, *, show_progress, extra, resume) -> Path`` (the record it wrote,
with ``engine: "detectron2"``), reading the same TransferConfig. Dense pose (``densepose``) exists only in
detectron2's DensePose project: that task runs on detectron2 with DensePose installed, or stops with one line.
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

from moco_core import checkpoint, distributed
from moco_core.config import ConfigError
from moco_core.run.progress import Progress, format_duration
from moco_core.run.rundir import require_fresh, require_same_mode, run_dir_lock
from moco_core.run.runtime import resolve_device
from transfer import engine
from transfer.config import per_process_batch, with_normalisation
from transfer.detection import data as detection_data
from transfer.detection.config import DENSEPOSE_NEEDED, TransferConfig, transfer_run_dir
from transfer.detection.datasets import DetectionData, load_data, require_a_batch
from transfer.detection.models import build_detector, load_resnet
from transfer.detection.sampling import RepeatFactorSampler, repeat_factors
from transfer.engine import fine_tune, sync_batchnorm
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


def require_densepose(engine: str) -> None:
    """Dense pose is detectron2's DensePose project only: a one-line ConfigError for --engine torchvision, or for
    auto and detectron2 where DensePose (the ``densepose`` package) cannot be imported."""
    if engine == "torchvision" or importlib.util.find_spec("detectron2") is None \
            or importlib.util.find_spec("densepose") is None:
        raise ConfigError(f"engine: {DENSEPOSE_NEEDED}")


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


def eval_keypoints(cfg: TransferConfig, weights: str, *, show_progress: bool | str = True,
                   extra: dict[str, Any] | None = None, resume: bool = False) -> Path:
    """Keypoint R-CNN on COCO keypoints fine-tuned from ``weights`` (a checkpoint path or "random"); the record's
    path."""
    if cfg.task != "keypoints":
        raise ConfigError(f"task: eval_keypoints needs a keypoints config, got {cfg.task}")
    return evaluate(cfg, weights, show_progress=show_progress, extra=extra, resume=resume)


def evaluate(cfg: TransferConfig, weights: str, *, show_progress: bool | str = True,
             extra: dict[str, Any] | None = None, resume: bool = False) -> Path:
    """The protocol for ``cfg.task`` on the engine ``cfg.engine`` resolves to; returns the result record's path.

    ``extra``: more top-level record fields. ``resume``: continue from the run directory's last checkpoint.
    """
    if cfg.task == "densepose":
        require_densepose(cfg.engine)
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
                device: torch.device, *, num_keypoints: int = 0) -> nn.Module:
    """The detector on ``device``; BN is synchronised when several processes run (the paper's SyncBN)."""
    return sync_batchnorm(build_detector(cfg, resnet, num_classes, num_keypoints=num_keypoints).to(device), device)


def _torchvision_run(cfg: TransferConfig, weights: str, device: torch.device, show_progress: bool | str,
                     extra: dict[str, Any], resume: bool) -> Path:
    main, world, started = distributed.is_main(), distributed.world_size(), time.perf_counter()
    run_dir = transfer_run_dir(cfg)
    if not resume:
        require_fresh(run_dir, (checkpoint.LAST,), "a fine-tuning", "pass --resume to continue it, or choose "
                      "another --output-dir")
    else:
        require_same_mode(run_dir)
    torch.manual_seed(cfg.run.seed)
    resnet, info = load_resnet(weights, cfg.detector.arch, cfg.run.weights_format)  # before the data
    cfg = with_normalisation(cfg, info.normalisation)  # the detector normalises its input as the weights expect
    data = load_data(cfg)
    require_a_batch(cfg, data, per_process_batch(cfg, world))
    model = build_model(cfg, resnet, len(data.class_names), device,
                        num_keypoints=len(data.keypoints.names) if data.keypoints else 0)
    train_set = detection_data.DetectionDataset(
        data.train, train=True, flip_prob=cfg.input.flip_prob, masks=cfg.detector.mask,
        keypoint_flip=data.keypoints.flip_indices if data.keypoints else None)
    sampler = None
    if cfg.data.repeat_threshold > 0:  # LVIS: images of rare categories repeated (transfer/detection/sampling.py)
        sampler = RepeatFactorSampler(repeat_factors(data.train, cfg.data.repeat_threshold),
                                      num_replicas=distributed.world_size(), rank=distributed.rank(),
                                      seed=cfg.run.seed)
    history = fine_tune(cfg, model, train_set, weights=weights, info=info, run_dir=run_dir, device=device,
                        resume=resume, show_progress=show_progress, what="detector", sampler=sampler)
    train_time = time.perf_counter() - started
    test_progress = Progress(-(-len(data.test) // (cfg.run.test_batch_size * world)), every=cfg.run.log_every * 5,
                             enabled=main and show_progress, label="test")
    results = _test(cfg, model, data, device, test_progress)
    if not main:
        return run_dir / "result.json"
    return write_transfer_record(run_dir, cfg, data, info, results, history, engine="torchvision",
                                 details={"world_size": world, "device": str(device)}, started=started,
                                 train_time=train_time, extra=extra)


def _test(cfg: TransferConfig, model: nn.Module, data: DetectionData, device: torch.device,
          progress: Progress) -> dict[str, Any]:
    """Predict the test split and score it: VOC AP50/AP/AP75 (+ per class); COCO, LVIS and Cityscapes box and mask
    AP (percent) by their official evaluators; keypoints box AP and AP^kp (percent)."""
    test_set = detection_data.DetectionDataset(data.test, train=False)
    kwargs = dict(device=device, amp=cfg.run.amp, batch_size=cfg.run.test_batch_size, workers=cfg.data.workers,
                  progress=progress)
    from transfer.detection.metrics import score

    if cfg.task == "voc":
        convert = detection_data.voc_detections(data.test)
    elif cfg.task == "keypoints":
        from transfer.detection.keypoints import keypoint_results

        convert = keypoint_results(data.test, data.contiguous_to_original)
    else:
        convert = detection_data.coco_results(data.test, data.contiguous_to_original, masks=cfg.detector.mask)
    found = engine.predict(model, test_set, convert, **kwargs)
    if not distributed.is_main():
        return {}
    started = time.perf_counter()  # the evaluator reports no steps: its start and its length
    progress.phase(f"test: scoring {len(found)} predictions on {len(data.test)} images ({cfg.task}'s evaluator)")
    results = score(cfg.task, found, data, masks=cfg.detector.mask)
    progress.clear()
    if progress.enabled and not progress.line_only:
        progress.message(f"test: scored in {format_duration(time.perf_counter() - started)}")
    return results
