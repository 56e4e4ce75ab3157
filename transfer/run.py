"""``moco eval voc`` and ``moco eval coco`` as plain functions: weights -> dataset -> detector -> fine-tuning ->
test -> result record.

The engine is detectron2 when it is installed (``transfer.detectron2_engine``, imported lazily) and torchvision's
detection models otherwise; both run the same protocol and the record names the one that ran. The detectron2
engine provides ``evaluate(cfg, weights, *, show_progress, extra, resume) -> Path`` (the record it wrote, with
``engine: "detectron2"``), reading the same TransferConfig.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torchvision
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

from lincls.backbone import BackboneInfo
from lincls.records import write_record
from moco_core import checkpoint, distributed
from moco_core.config import ConfigError, to_dict
from moco_core.data import DatasetError
from moco_core.progress import MetricsWriter, Progress, format_duration
from moco_core.rundir import write_run_files
from moco_core.train import resolve_device
from transfer import engine
from transfer.config import TransferConfig, model_name
from transfer.models import build_detector, load_resnet


def resolve_engine(name: str) -> str:
    """"auto" is detectron2 when both it and our detectron2 engine can be imported, else torchvision."""
    has_detectron2 = importlib.util.find_spec("detectron2") is not None
    if name == "auto":
        ours = importlib.util.find_spec("transfer.detectron2_engine") is not None
        return "detectron2" if has_detectron2 and ours else "torchvision"
    if name == "detectron2" and not has_detectron2:
        raise ConfigError("engine: detectron2 is not installed (it is on no package registry: install it from its "
                          "source), or use --engine torchvision")
    return name


def eval_voc(cfg: TransferConfig, weights: str, *, show_progress: bool = True,
             extra: dict[str, Any] | None = None, resume: bool = False) -> Path:
    """Faster R-CNN on VOC fine-tuned from ``weights`` (a checkpoint path or "random"); the record's path."""
    if cfg.task != "voc":
        raise ConfigError(f"task: eval_voc needs a voc config, got {cfg.task}")
    return evaluate(cfg, weights, show_progress=show_progress, extra=extra, resume=resume)


def eval_coco(cfg: TransferConfig, weights: str, *, show_progress: bool = True,
              extra: dict[str, Any] | None = None, resume: bool = False) -> Path:
    """Mask R-CNN on COCO fine-tuned from ``weights`` (a checkpoint path or "random"); the record's path."""
    if cfg.task != "coco":
        raise ConfigError(f"task: eval_coco needs a coco config, got {cfg.task}")
    return evaluate(cfg, weights, show_progress=show_progress, extra=extra, resume=resume)


def evaluate(cfg: TransferConfig, weights: str, *, show_progress: bool = True,
             extra: dict[str, Any] | None = None, resume: bool = False) -> Path:
    """The protocol for ``cfg.task`` on the engine ``cfg.engine`` resolves to; returns the result record's path.

    ``extra``: more top-level record fields. ``resume``: continue from the run directory's last checkpoint.
    """
    chosen = resolve_engine(cfg.engine)
    cfg = dataclasses.replace(cfg, engine=chosen)
    if chosen == "detectron2":
        try:
            from transfer import detectron2_engine
        except ImportError as err:
            raise ConfigError(f"engine: detectron2 is installed but its engine cannot be loaded ({err}); use "
                              f"--engine torchvision") from None
        return detectron2_engine.evaluate(cfg, weights, show_progress=show_progress, extra=extra or {},
                                          resume=resume)
    device = resolve_device(cfg.run.device)
    with distributed.process_group(device):
        return _torchvision_run(cfg, weights, device, show_progress, extra or {}, resume)


@dataclass
class DetectionData:
    """The training and test dataset dicts with what evaluation needs."""

    root: Path
    name: str  # readable, for the record
    train: list[dict[str, Any]]
    test: list[dict[str, Any]]
    class_names: list[str]
    contiguous_to_original: dict[int, int]  # COCO: our 0..K-1 -> the annotation file's category ids
    coco_gt: Path | None  # COCO: the test annotation file


def _split_name(name: str, task: str) -> tuple[str, str]:
    """"voc_2007_trainval" -> ("2007", "trainval"); "coco_2017_val" -> ("2017", "val")."""
    parts = name.split("_")
    if len(parts) != 3 or parts[0] != task or not parts[1].isdigit() or not parts[2]:
        raise ConfigError(f"data: dataset name {name!r} is not {task}_<year>_<split> (e.g. "
                          f"{'voc_2007_trainval' if task == 'voc' else 'coco_2017_train'})")
    return parts[1], parts[2]


def load_data(cfg: TransferConfig) -> DetectionData:
    """Read the configured datasets (generating the embedded ones on first use); DatasetError names what is
    missing. Training images without a usable object are left out (detectron2 filters empty images)."""
    data = _load_voc(cfg) if cfg.task == "voc" else _load_coco(cfg)
    check_image_sizes([*data.train, *data.test], workers=max(cfg.data.workers, 1))
    return data


_EXIF_ORIENTATION = 0x0112
_SIZE_PROBLEMS_SHOWN = 3


def _image_size_problem(record: dict[str, Any]) -> str | None:
    """Why ``record``'s image disagrees with its annotation (size after EXIF rotation, as it is decoded), or None.

    Reads the file's header only; nothing is decoded.
    """
    path = record["file_name"]
    try:
        with Image.open(path) as image:
            width, height = image.size
            if image.getexif().get(_EXIF_ORIENTATION) in (5, 6, 7, 8):  # a quarter turn swaps the sides
                width, height = height, width
    except FileNotFoundError:
        return f"{path} is missing"
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        return f"{path} is not a readable image ({err.__class__.__name__})"
    if (width, height) != (record["width"], record["height"]):
        return f"{path} is {width}x{height} but its annotation says {record['width']}x{record['height']}"
    return None


def check_image_sizes(records: list[dict[str, Any]], *, workers: int = 8) -> None:
    """Before anything trains: every image exists, opens, and has the size its annotation gives (the boxes and
    masks are in those coordinates). A DatasetError counts the bad images and names the first few."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        problems = [p for p in pool.map(_image_size_problem, records, chunksize=64) if p]
    if problems:
        shown = "; ".join(problems[:_SIZE_PROBLEMS_SHOWN])
        more = f"; and {len(problems) - _SIZE_PROBLEMS_SHOWN} more" if len(problems) > _SIZE_PROBLEMS_SHOWN else ""
        raise DatasetError(f"{len(problems)} of {len(records)} images do not match their annotations: {shown}{more}")


def _load_voc(cfg: TransferConfig) -> DetectionData:
    from transfer.voc import VOC_CLASSES, check_voc_layout, load_voc

    embedded = cfg.data.path == "embedded"
    if embedded:
        from moco_core.shapes import CLASSES
        from transfer.embedded import ensure_voc

        root, class_names = ensure_voc(), list(cfg.data.classes or CLASSES)
    else:
        root, class_names = Path(str(cfg.data.path)).expanduser(), list(cfg.data.classes or VOC_CLASSES)
    splits = [_split_name(n, "voc") for n in (*cfg.data.train, cfg.data.test)]
    for year, split in splits:
        check_voc_layout(root / f"VOC{year}", [split])
    sets = [load_voc(root / f"VOC{year}", split, class_names) for year, split in splits]
    train = [d for dicts in sets[:-1] for d in dicts if _trainable(d)]
    name = "embedded" if embedded else "VOC" + "+".join(year[2:] for year, _ in splits[:-1])
    return DetectionData(root, name, train, sets[-1], class_names, {i: i for i in range(len(class_names))}, None)


def _trainable(record: dict[str, Any]) -> bool:
    return any(not a.get("iscrowd") for a in record["annotations"])  # difficult ones train, as in detectron2


def _load_coco(cfg: TransferConfig) -> DetectionData:
    from transfer.coco import filter_empty, load_coco, require_annotations

    embedded = cfg.data.path == "embedded"
    if embedded:
        from transfer.embedded import ensure_coco

        root = ensure_coco()
    else:
        root = Path(str(cfg.data.path)).expanduser()
    loaded = []
    for name in (*cfg.data.train, cfg.data.test):
        year, split = _split_name(name, "coco")
        annotations = root / "coco" / "annotations" / f"instances_{split}{year}.json"
        images = root / "coco" / f"{split}{year}"
        for path in (annotations, images):
            if not path.exists():
                raise DatasetError(f"{name}: {path} not found (expected detectron2's layout: coco/annotations/"
                                   f"instances_{split}{year}.json and coco/{split}{year}/ under {root})")
        # the images it keeps are checked (present, readable, of the annotated size) by load_data
        loaded.append((name, annotations, load_coco(annotations, images, check_files=False)))
    class_names, mapping = loaded[-1][2][1], loaded[-1][2][2]
    train: list[dict[str, Any]] = []
    for name, _, (dicts, names, _) in loaded[:-1]:
        if list(names) != list(class_names):
            raise DatasetError(f"{name}: its categories differ from {cfg.data.test}'s")
        require_annotations(dicts, name)
        train += [d for d in filter_empty(dicts) if _trainable(d)]
    test_name, gt, (test, _, _) = loaded[-1]
    require_annotations(test, test_name)
    train_splits = [_split_name(n, "coco") for n in cfg.data.train]
    name = "embedded" if embedded else "COCO " + "+".join(split + year for year, split in train_splits)
    return DetectionData(root, name, train, test, list(class_names), dict(mapping), gt)


def build_model(cfg: TransferConfig, resnet: torchvision.models.ResNet, num_classes: int,
                device: torch.device) -> nn.Module:
    """The detector on ``device``; BN becomes SyncBatchNorm when several CUDA processes run (the paper's SyncBN)."""
    model = build_detector(cfg, resnet, num_classes).to(device)
    # Deviation from the paper: SyncBatchNorm is CUDA-only, so CPU processes keep per-process BN statistics.
    if distributed.world_size() > 1 and device.type == "cuda":
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return model


def _torchvision_run(cfg: TransferConfig, weights: str, device: torch.device, show_progress: bool,
                     extra: dict[str, Any], resume: bool) -> Path:
    main, world, started = distributed.is_main(), distributed.world_size(), time.perf_counter()
    s = cfg.solver
    if s.batch_size % world:
        raise ConfigError(f"solver.batch_size: {s.batch_size} is not divisible by the {world} processes")
    run_dir = Path(cfg.run.output_dir or f"runs/{cfg.task}")
    torch.manual_seed(cfg.run.seed)
    resnet, info = load_resnet(weights, cfg.detector.arch)  # before the data: a bad file fails at once
    data = load_data(cfg)
    local_batch = s.batch_size // world
    if len(data.train) < local_batch:
        raise DatasetError(f"{'+'.join(cfg.data.train)}: {len(data.train)} training images with objects, fewer "
                           f"than a batch of {local_batch}")
    model = build_model(cfg, resnet, len(data.class_names), device)
    optimizer = engine.build_optimizer(model, s)
    start = _resume(run_dir, model, optimizer) if resume else 0
    trained: nn.Module = model
    if world > 1:
        trained = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                                      else None)
    train_set = engine.DetectionDataset(data.train, train=True, flip_prob=cfg.input.flip_prob,
                                        masks=cfg.detector.mask)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=distributed.rank(), shuffle=True,
                                 seed=cfg.run.seed, drop_last=True)
    loader = DataLoader(train_set, batch_size=local_batch, sampler=sampler, num_workers=cfg.data.workers,
                        collate_fn=engine.collate, drop_last=True, pin_memory=device.type == "cuda",
                        persistent_workers=cfg.data.workers > 0)
    batches = engine.endless(loader, sampler, epoch=start * s.batch_size // len(train_set))
    metrics = MetricsWriter(run_dir / "metrics.jsonl", enabled=main)
    if main:
        write_run_files(run_dir, to_dict(cfg), {"weights": weights, "backbone_format": info.format, "engine":
                                                 "torchvision", "world_size": world, "device": str(device)})
        metrics.truncate_after(start)

    def save(done: int) -> None:
        if main:
            checkpoint.save_atomic({"iteration": done, "model": model.state_dict(), "optimizer":
                                    optimizer.state_dict(), "config": to_dict(cfg), "format": "moco-transfer",
                                    "backbone": dataclasses.asdict(info)}, run_dir / checkpoint.LAST)

    progress = Progress(s.iterations, done_steps=start, every=cfg.run.log_every, enabled=main and show_progress)
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


def write_transfer_record(run_dir: Path, cfg: TransferConfig, data: DetectionData, info: BackboneInfo,
                          results: dict[str, Any], history: list[dict[str, float]], *, engine: str,
                          details: dict[str, Any], started: float, train_time: float,
                          extra: dict[str, Any]) -> Path:
    """The result record of a VOC/COCO run, the same for every engine (main process only); prints a summary.

    ``details``: the engine's own top-level fields (processes, device, version); ``extra``: the caller's.
    """
    # An area range without ground truth scores NaN (COCOeval's -1); the record stores null, valid JSON.
    results = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in results.items()}
    s = cfg.solver
    record = write_record(
        run_dir / "result.json", task=cfg.task, protocol=cfg.task, metrics=results, backbone=info,
        dataset={"path": cfg.data.path, "name": data.name, "root": str(data.root),
                 "train_split": "+".join(cfg.data.train), "test_split": cfg.data.test,
                 "train_images": len(data.train), "test_images": len(data.test), "classes": len(data.class_names)},
        config={"model": model_name(cfg, info.arch), "schedule": cfg.schedule, "iterations": s.iterations,
                "batch_size": s.batch_size, "lr": s.lr * s.batch_size / 16, **to_dict(cfg)},
        history=history,
        extra={"engine": engine, **details, "wall_time_s": time.perf_counter() - started, "train_time_s": train_time,
               **extra})
    summary = " ".join(f"{k} {v:.2f}" for k, v in results.items() if isinstance(v, float))
    print(f"{cfg.task} ({model_name(cfg, info.arch)}, {engine}): {summary} in "
          f"{format_duration(time.perf_counter() - started)}", file=sys.stderr)
    return record


def _resume(run_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Load the run directory's last checkpoint into ``model`` and ``optimizer``; the iterations it had done."""
    saved = checkpoint.load(run_dir / checkpoint.LAST)
    if saved.get("format") != "moco-transfer":
        raise checkpoint.CheckpointError(f"{run_dir / checkpoint.LAST}: not a detection fine-tuning checkpoint")
    try:
        model.load_state_dict(saved["model"])
    except RuntimeError as err:
        raise checkpoint.CheckpointError(f"{run_dir / checkpoint.LAST}: does not match the configured detector "
                                         f"({str(err).splitlines()[0]})") from None
    optimizer.load_state_dict(saved["optimizer"])
    return int(saved["iteration"])


def _test(cfg: TransferConfig, model: nn.Module, data: DetectionData, device: torch.device,
          progress: Progress) -> dict[str, Any]:
    """Predict the test split and score it: VOC AP50/AP/AP75 (+ per class), COCO box and mask AP (percent)."""
    test_set = engine.DetectionDataset(data.test, train=False)
    kwargs = dict(device=device, amp=cfg.run.amp, batch_size=cfg.run.test_batch_size, workers=cfg.data.workers,
                  progress=progress)
    if cfg.task == "voc":
        from transfer.metrics import voc_evaluate

        found = engine.predict(model, test_set, engine.voc_detections(data.test), **kwargs)
        detections: dict[int, list] = {k: [] for k in range(len(data.class_names))}
        for class_id, detection in found:
            detections[class_id].append(detection)
        return voc_evaluate(detections, data.test, data.class_names) if distributed.is_main() else {}
    from transfer.metrics import coco_evaluate

    convert = engine.coco_results(data.test, data.contiguous_to_original, masks=cfg.detector.mask)
    results = engine.predict(model, test_set, convert, **kwargs)
    if not distributed.is_main():
        return {}
    return coco_evaluate(results, data.coco_gt, iou_types=("bbox", "segm") if cfg.detector.mask else ("bbox",))
