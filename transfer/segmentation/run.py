"""``moco eval semseg`` as a plain function: weights -> dataset -> segmentation network -> fine-tuning (the shared
:func:`transfer.engine.fine_tune`) -> whole-image test -> mIoU -> result record.

Testing is on each whole image at its full resolution, one at a time (A.5: "inference is performed on the full
image"), never in sliding windows; the predictions are the argmax of the upsampled logits.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import nn
from torch.utils.data import DataLoader

from moco_core import checkpoint, distributed
from moco_core.config import to_dict
from moco_core.data.data import DatasetError
from moco_core.errors import print_warning
from moco_core.model.backbone import BackboneInfo, load_resnet
from moco_core.run.progress import Progress, format_duration
from moco_core.run.records import write_record
from moco_core.run.rundir import require_fresh, require_same_mode, run_dir_lock
from moco_core.run.runtime import autocast, resolve_device
from moco_core.segmentation_metrics import confusion_matrix, scores
from transfer import engine
from transfer.config import input_statistics, with_normalisation
from transfer.engine import fine_tune, sync_batchnorm
from transfer.records import null_nan, recipe_fields
from transfer.segmentation.config import SemsegConfig, model_name, semseg_run_dir
from transfer.segmentation.datasets import SegmentationData, SegmentationDataset, load_data
from transfer.segmentation.embedded import dataset_version
from transfer.segmentation.model import SegmentationNetwork


def evaluate(cfg: SemsegConfig, weights: str, *, show_progress: bool | str = True,
             extra: dict[str, Any] | None = None, resume: bool = False) -> Path:
    """The paper's semantic segmentation protocol fine-tuned from ``weights`` (a checkpoint path or "random");
    returns the result record's path. ``resume``: continue from the run directory's last checkpoint."""
    device = resolve_device(cfg.run.device)
    with distributed.process_group(device), run_dir_lock(semseg_run_dir(cfg), device):
        return _run(cfg, weights, device, show_progress, extra or {}, resume)


def build_network(cfg: SemsegConfig, resnet: torchvision.models.ResNet, num_classes: int) -> SegmentationNetwork:
    """The configured network on ``resnet`` (dilated in place)."""
    h, (mean, std) = cfg.head, input_statistics(cfg)
    return SegmentationNetwork(resnet, num_classes, output_stride=h.output_stride, channels=h.channels,
                               convs=h.convs, dilation=h.dilation, ignore_index=cfg.data.ignore_index,
                               mean=mean, std=std)


def _run(cfg: SemsegConfig, weights: str, device: torch.device, show_progress: bool | str, extra: dict[str, Any],
         resume: bool) -> Path:
    started, run_dir = time.perf_counter(), semseg_run_dir(cfg)
    if not resume:
        require_fresh(run_dir, (checkpoint.LAST,), "a fine-tuning", "pass --resume to continue it, or choose "
                      "another --output-dir")
    else:
        require_same_mode(run_dir)
    torch.manual_seed(cfg.run.seed)
    # The weights before the data: a bad file fails at once (a ViT's too: the network is a ResNet's, A.5)
    resnet, info = load_resnet(weights, arch=cfg.head.arch, arch_option="head.arch",
                               weights_format=cfg.run.weights_format)
    cfg = with_normalisation(cfg, info.normalisation)  # the network normalises its input as the weights expect
    d, i = cfg.data, cfg.input
    data = load_data(str(d.path), d.train, d.test, d.classes)
    if distributed.is_main():
        for line in data.warnings:
            print_warning(line)
    network = build_network(cfg, resnet, len(data.class_names))
    if len(data.train) < cfg.solver.batch_size:
        raise DatasetError(f"{d.train}: {len(data.train)} training images, fewer than a batch of "
                           f"{cfg.solver.batch_size}")
    model = sync_batchnorm(network.to(device), device)
    train_set = SegmentationDataset(data.train, train=True, label_map=data.label_map, crop_size=i.crop_size,
                                    scale_range=i.scale_range, flip_prob=i.flip_prob, mean=i.mean,
                                    ignore_index=d.ignore_index, num_classes=len(data.class_names))
    history = fine_tune(cfg, model, train_set, weights=weights, info=info, run_dir=run_dir, device=device,
                        resume=resume, show_progress=show_progress, what="segmentation network")
    train_time = time.perf_counter() - started
    matrix = test(cfg, model, data, device, show_progress=show_progress)
    if not distributed.is_main():
        return run_dir / "result.json"
    if not matrix.sum():  # every pixel ignored or void: no IoU, no accuracy to report
        raise DatasetError(f"test set {d.test}: no labelled pixel in its {len(data.test)} label maps (every value is "
                           f"the ignore index {d.ignore_index} or outside the {len(data.class_names)} classes): "
                           f"mIoU is undefined; no result recorded")
    results = scores(matrix.numpy(), data.class_names)
    return _record(run_dir, cfg, data, info, results, history, started=started, train_time=train_time, extra=extra)


@torch.no_grad()
def test(cfg: SemsegConfig, model: nn.Module, data: SegmentationData, device: torch.device, *,
         show_progress: bool | str = False) -> torch.Tensor:
    """The (K, K) confusion matrix of the test split over all processes (each predicts every world-th image). A
    pair that did not decode is left out, with one warning line counting them (main process)."""
    model.eval()
    dataset = SegmentationDataset(data.test, train=False, label_map=data.label_map,
                                  ignore_index=cfg.data.ignore_index, num_classes=len(data.class_names))
    shard = torch.utils.data.Subset(dataset, range(distributed.rank(), len(dataset), distributed.world_size()))
    loader = DataLoader(shard, batch_size=1, num_workers=cfg.data.workers, collate_fn=engine.collate)
    k = len(data.class_names)
    matrix = torch.zeros(k, k, dtype=torch.int64)
    progress = Progress(len(shard), every=cfg.run.log_every * 5, enabled=distributed.is_main() and show_progress,
                        label="test")
    unreadable: list[str] = []
    for step, (images, targets, _) in enumerate(loader, 1):
        if "unreadable" in targets[0]:
            unreadable.append(targets[0]["unreadable"])
            continue
        with autocast(device, cfg.run.amp):
            logits = model(images[0][None].to(device))  # (1, K, H, W) at the image's own size
        matrix += confusion_matrix(targets[0]["mask"], logits.argmax(1)[0].cpu(), k)
        progress.update(step, 0, 1, images=step)
    left_out = [name for names in distributed.all_gather_objects(unreadable) for name in names]
    if len(left_out) == len(dataset):
        raise DatasetError(f"test set {cfg.data.test}: none of its {len(dataset)} pairs decoded (first: {left_out[0]})")
    if left_out and distributed.is_main():
        print_warning(f"test set {cfg.data.test}: {len(left_out)} of {len(dataset)} pairs did not decode and are "
                      f"left out of the score: {', '.join(left_out[:5])}{' and more' if len(left_out) > 5 else ''}")
    return sum(distributed.all_gather_objects(matrix), torch.zeros_like(matrix))


def record_config(cfg: SemsegConfig, arch: str) -> dict[str, Any]:
    """The record's ``config``: the network's name, schedule, iterations, batch, lr and test mode, then the whole
    config (as the detection records have it)."""
    return {**recipe_fields(cfg, model_name(cfg, arch)), "test": "whole image", **to_dict(cfg)}


def _record(run_dir: Path, cfg: SemsegConfig, data: SegmentationData, info: BackboneInfo, results: dict[str, Any],
            history: list[dict[str, float]], *, started: float, train_time: float, extra: dict[str, Any]) -> Path:
    """The result record (main process only), and a one-line summary on stderr."""
    name = model_name(cfg, info.arch)
    version = {"version": dataset_version()} if cfg.data.path == "embedded" else {}
    record = write_record(
        run_dir / "result.json", task=cfg.task, protocol=cfg.task, metrics=null_nan(results), backbone=info,
        dataset={"path": cfg.data.path, "name": data.name, "root": str(data.root), "train_split": cfg.data.train,
                 "test_split": cfg.data.test, "train_images": len(data.train), "test_images": len(data.test),
                 "classes": len(data.class_names), "class_names": list(data.class_names),
                 "ignore_index": cfg.data.ignore_index, **version},
        config=record_config(cfg, info.arch),
        history=history,
        extra={"engine": "torchvision", "world_size": distributed.world_size(),
               "device": str(resolve_device(cfg.run.device)), "wall_time_s": time.perf_counter() - started,
               "train_time_s": train_time, **extra})
    print(f"semseg ({name} on {data.name}, torchvision): mIoU {results['mIoU']:.2f} pixel_acc "
          f"{results['pixel_acc']:.2f} in {format_duration(time.perf_counter() - started)}", file=sys.stderr)
    return record
