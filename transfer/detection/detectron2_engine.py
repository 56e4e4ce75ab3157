"""The detection protocol on detectron2, the engine the paper used (``moco eval voc|coco|lvis|cityscapes|densepose
--engine detectron2``; dense pose through :mod:`transfer.detection.detectron2_densepose`). LVIS's repeat-factor
sampling is detectron2's own sampler (DATALOADER.SAMPLER_TRAIN); the LVIS and Cityscapes test splits are scored by
the official evaluators through :mod:`transfer.detection.metrics`.

detectron2 is not on any package registry: this module is imported only by ``transfer.detection.run.evaluate`` when the
engine resolves to detectron2, and only it imports detectron2. The config is ``get_cfg()`` with the values of
:func:`transfer.detection.detectron2_config.detectron2_options` written over it, from the same TransferConfig
presets the torchvision engine runs. The backbone is converted by :mod:`transfer.convert` into ``backbone.pkl`` in the
run directory and loaded by ``DetectionCheckpointer`` (its name-matching heuristics put ``res5`` in the C4 ROI head);
"random" loads nothing. Our VOC/COCO readers' dicts are registered as ``moco_<name>`` datasets. Training is
detectron2's ``SimpleTrainer`` (``AMPTrainer`` with run.amp on CUDA) with its LR-scheduler, precise-BN and
checkpointer hooks and our metrics.jsonl; testing runs the model over the test dicts and scores its outputs
with :mod:`transfer.detection.metrics`, the code the torchvision engine uses, so the two engines' numbers compare.

Several processes: ``moco eval ... --nproc N`` (or torchrun) starts them and each joins detectron2's
process groups as its own ``launch`` would; :func:`launch` runs detectron2's launcher itself (several machines).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Protocol

import detectron2
import numpy as np
import torch
from detectron2.checkpoint import DetectionCheckpointer
from detectron2.config import CfgNode, get_cfg
from detectron2.data import DatasetCatalog, DatasetMapper, MetadataCatalog
from detectron2.data import build_detection_test_loader as test_loader
from detectron2.data import build_detection_train_loader as train_loader
from detectron2.data import transforms as T
from detectron2.engine import AMPTrainer, HookBase, SimpleTrainer, create_ddp_model, hooks
from detectron2.engine import launch as detectron2_launch
from detectron2.layers import get_norm
from detectron2.modeling import build_model
from detectron2.modeling.backbone.resnet import BasicBlock, ResNet
from detectron2.modeling.roi_heads import ROI_HEADS_REGISTRY, Res5ROIHeads
from detectron2.solver import build_lr_scheduler, build_optimizer
from detectron2.structures import BoxMode
from detectron2.utils import comm
from detectron2.utils.env import seed_all_rng
from torch import nn

from moco_core import distributed
from moco_core.checkpoint import CheckpointError
from moco_core.config import to_dict
from moco_core.errors import NonFiniteLossError
from moco_core.model.backbone import BackboneInfo
from moco_core.optimizer_state import checked_trainer_load
from moco_core.run.progress import MetricsWriter, Progress
from moco_core.run.rundir import (
    require_fresh,
    require_same_mode,
    run_dir_lock,
    write_run_files,
    write_text_atomic,
)
from moco_core.run.runtime import resolve_device
from transfer.config import per_process_batch, with_normalisation
from transfer.convert import convert_file, load_detectron2_pkl
from transfer.detection.config import TransferConfig, transfer_run_dir
from transfer.detection.datasets import DetectionData, load_data, parse_dataset, require_a_batch
from transfer.detection.detectron2_config import C4_ROI_HEADS, C4_ROI_HEADS_EXTRA_NORM, dataset_name, detectron2_options
from transfer.detection.models import load_resnet
from transfer.records import write_transfer_record

BASIC_BLOCKS = {18: 2, 34: 3}  # res5 blocks of the ResNets made of basic blocks


class MocoRes5ROIHeads(Res5ROIHeads):
    """detectron2's C4 ROI heads (res5 on RoIAligned res4 features, shared by the box and mask branches) with
    res5 as the backbone's depth has it: detectron2 always builds R50's three bottlenecks there, R18/R34 have
    two/three basic blocks (512 channels), which their converted weights fill."""

    @classmethod
    def _build_res5_block(cls, cfg: CfgNode) -> tuple[nn.Sequential, int]:
        depth = cfg.MODEL.RESNETS.DEPTH
        if depth not in BASIC_BLOCKS:
            return super()._build_res5_block(cfg)
        out_channels, blocks = cfg.MODEL.RESNETS.RES2_OUT_CHANNELS * 8, BASIC_BLOCKS[depth]
        stage = ResNet.make_stage(BasicBlock, blocks, stride_per_block=[2] + [1] * (blocks - 1),
                                  in_channels=out_channels // 2, out_channels=out_channels,
                                  norm=cfg.MODEL.RESNETS.NORM)
        return nn.Sequential(*stage), out_channels


class MocoRes5ROIHeadsExtraNorm(MocoRes5ROIHeads):
    """:class:`MocoRes5ROIHeads` with a norm layer appended to res5 (the MoCo configs' Res5ROIHeadsExtraNorm).

    The fine-tuned backbone's features are not on the scale of supervised ones, and the new box and mask
    predictors read res5 directly: the extra norm (newly initialised, RESNETS.NORM) puts their input on a common
    footing. It is named ``res5.norm`` as in the official head, so fine-tuned checkpoints load in either.
    """

    @classmethod
    def _build_res5_block(cls, cfg: CfgNode) -> tuple[nn.Sequential, int]:
        res5, out_channels = super()._build_res5_block(cfg)
        res5.add_module("norm", get_norm(cfg.MODEL.RESNETS.NORM, out_channels))
        return res5, out_channels


def register_roi_heads() -> None:
    """Make our C4 heads known to ``ROI_HEADS_REGISTRY`` (once per process; ROI_HEADS.NAME names them)."""
    for name, heads in ((C4_ROI_HEADS, MocoRes5ROIHeads), (C4_ROI_HEADS_EXTRA_NORM, MocoRes5ROIHeadsExtraNorm)):
        if name not in ROI_HEADS_REGISTRY:
            ROI_HEADS_REGISTRY.register(heads)


class TaskHooks(Protocol):
    """What a task changes in this engine's run, one object per run (:func:`task_hooks`)."""

    def add_config(self, d2cfg: CfgNode) -> None:
        """Extra config keys on ``get_cfg()``'s, before our options are written."""

    def register(self, cfg: TransferConfig, data: DetectionData) -> tuple[str, ...]:
        """Register the datasets; the training names."""

    def train_loader(self, d2cfg: CfgNode, augmentations: list[Any]) -> Any: ...

    def test_loader(self, cfg: TransferConfig, d2cfg: CfgNode, name: str, augmentations: list[Any]) -> Any: ...

    def evaluator(self, d2cfg: CfgNode, name: str) -> Any | None:
        """An evaluator of the task's own, fed every test batch (``process(inputs, outputs)``), or None."""

    def results(self, evaluator: Any, cfg: TransferConfig, data: DetectionData) -> dict[str, float]:
        """The evaluator's metrics, beside the box (and mask) AP every task gets; every process calls it."""


class DetectionHooks:
    """The detection tasks change nothing: our readers' dicts, detectron2's mapper and loaders, no evaluator of
    their own."""

    def add_config(self, d2cfg: CfgNode) -> None:
        pass

    def register(self, cfg: TransferConfig, data: DetectionData) -> tuple[str, ...]:
        return register_datasets(cfg, data)

    def train_loader(self, d2cfg: CfgNode, augmentations: list[Any]) -> Any:
        return train_loader(d2cfg, mapper=DatasetMapper(d2cfg, is_train=True, augmentations=augmentations))

    def test_loader(self, cfg: TransferConfig, d2cfg: CfgNode, name: str, augmentations: list[Any]) -> Any:
        mapper = DatasetMapper(d2cfg, is_train=False, augmentations=augmentations)
        return test_loader(DatasetCatalog.get(name), mapper=mapper, batch_size=cfg.run.test_batch_size,
                           num_workers=cfg.data.workers)

    def evaluator(self, d2cfg: CfgNode, name: str) -> None:
        return None

    def results(self, evaluator: Any, cfg: TransferConfig, data: DetectionData) -> dict[str, float]:
        return {}


def task_hooks(cfg: TransferConfig) -> TaskHooks:
    """Dense pose's hooks (:class:`transfer.detection.detectron2_densepose.DensePoseHooks`: DensePose's config
    keys, datasets, loaders and evaluator; imports DensePose) for ``cfg.task == "densepose"``, else
    :class:`DetectionHooks`."""
    if cfg.task == "densepose":
        from transfer.detection.detectron2_densepose import DensePoseHooks

        return DensePoseHooks()
    return DetectionHooks()


def build_config(cfg: TransferConfig, *, num_classes: int, arch: str, weights: str, device: torch.device,
                 output_dir: Path, mask_format: str = "polygon", num_keypoints: int = 0,
                 oks_sigmas: tuple[float, ...] = ()) -> CfgNode:
    """``get_cfg()`` with our options written over it, frozen; an unknown key is a KeyError (a typo here)."""
    options = detectron2_options(cfg, num_classes=num_classes, arch=arch, weights=weights, device=str(device),
                                 num_keypoints=num_keypoints, oks_sigmas=oks_sigmas)
    options["OUTPUT_DIR"] = str(output_dir)
    options["INPUT.MASK_FORMAT"] = mask_format
    if options["MODEL.RESNETS.NORM"] == "SyncBN" and device.type == "cpu" and distributed.world_size() > 1:
        # Deviation from the official code: torch's SyncBatchNorm is CUDA-only; CPU processes synchronise the
        # same statistics with detectron2's naiveSyncBN (gloo all-reduce).
        options = {k: "naiveSyncBN" if v == "SyncBN" else v for k, v in options.items()}
    d2cfg = get_cfg()
    task_hooks(cfg).add_config(d2cfg)  # dense pose: DensePose's keys (MODEL.ROI_DENSEPOSE_HEAD...)
    for key, value in options.items():
        *path, leaf = key.split(".")
        node = d2cfg
        for part in path:
            node = node[part]
        if leaf not in node:
            raise KeyError(f"{key} is not a detectron2 config key")
        node[leaf] = value
    d2cfg.freeze()
    return d2cfg


def _with_box_mode(dicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our readers' boxes are [x0, y0, x1, y1] in pixels: detectron2 wants that said per annotation. Keypoints
    move to pixel centres (COCO's indices + 0.5), as detectron2's own COCO loader puts them."""
    def annotation(a: dict[str, Any]) -> dict[str, Any]:
        moved = {**a, "bbox_mode": BoxMode.XYXY_ABS}
        if "keypoints" in a:
            moved["keypoints"] = [v + 0.5 if k % 3 != 2 else v for k, v in enumerate(a["keypoints"])]
        return moved

    return [{**d, "annotations": [annotation(a) for a in d["annotations"]]} for d in dicts]


def register_datasets(cfg: TransferConfig, data: DetectionData) -> tuple[str, ...]:
    """Register the training sets and the test set as ``moco_<name>``; the training names registered.

    The training images of each name are the loaded ones in its directory (VOC<year>/, coco/<split><year>/);
    names sharing a directory (voc_2007_train + voc_2007_val) are registered together as ``moco_a+b``.
    Difficult VOC objects stay in the training annotations, as detectron2's VOC loader keeps them.
    """
    groups: dict[Path, list[str]] = defaultdict(list)
    for name in cfg.data.train:
        groups[(data.root / parse_dataset(name, cfg.task).folder).absolute()].append(name)
    parts: dict[str, list[dict[str, Any]]] = {"+".join(names): [] for names in groups.values()}
    first = next(iter(groups))
    for record in _with_box_mode(data.train):
        folder = next((f for f in groups if Path(record["file_name"]).is_relative_to(f)), first)
        parts["+".join(groups[folder])].append(record)
    parts[cfg.data.test] = _with_box_mode(data.test)
    metadata: dict[str, Any] = {"thing_classes": list(data.class_names)}
    if cfg.task != "voc":  # COCO, keypoints, LVIS, Cityscapes: the file's category (label) ids
        metadata["thing_dataset_id_to_contiguous_id"] = {v: k for k, v in data.contiguous_to_original.items()}
    if data.keypoints is not None:  # DatasetMapper's flip indices come from these (create_keypoint_hflip_indices)
        metadata["keypoint_names"] = list(data.keypoints.names)
        metadata["keypoint_flip_map"] = list(data.keypoints.flip_pairs)
    for name, dicts in parts.items():
        registered = dataset_name(name)
        if registered in DatasetCatalog:  # an earlier run in this process: its dicts may differ
            DatasetCatalog.remove(registered)
            MetadataCatalog.remove(registered)
        DatasetCatalog.register(registered, lambda dicts=dicts: dicts)
        MetadataCatalog.get(registered).set(**metadata)
    return tuple(dataset_name(name) for name in parts if name != cfg.data.test)


def _augmentations(cfg: TransferConfig, *, train: bool) -> list[T.Augmentation]:
    """Shorter side drawn from min_size_train (test: min_size_test), longer side capped; flip in training."""
    i = cfg.input
    if not train:
        return [T.ResizeShortestEdge(i.min_size_test, i.max_size)]
    flip = [T.RandomFlip(prob=i.flip_prob, horizontal=True)] if i.flip_prob > 0 else []
    return [T.ResizeShortestEdge(list(i.min_size_train), i.max_size, "choice"), *flip]


def _check_loaded(model: nn.Module, converted: dict[str, np.ndarray]) -> None:
    """Every converted array must now be in the model, once, unchanged (the linear protocol's sanity check,
    for detectron2's suffix matching): a backbone that silently stayed random is an error."""
    state = model.state_dict()
    for key, array in converted.items():
        found = [name for name in state if name == key or name.endswith("." + key)]
        if len(found) != 1 or not torch.equal(state[found[0]].cpu(), torch.as_tensor(array)):
            raise CheckpointError(f"backbone tensor {key!r} was not loaded into the detector (matches: {found[:3]})")


class _Log(HookBase):
    """Every ``every`` iterations and at the last: the losses averaged over the window (summed ``total_loss``
    as ``loss``) and the lr to metrics.jsonl (and its loggers) and the record's history; a progress line. Main
    process only."""

    def __init__(self, *, every: int, metrics: MetricsWriter, progress: Progress, batch_size: int,
                 epoch_size: int, history: list[dict[str, float]]) -> None:
        self.every, self.metrics, self.progress, self.history = every, metrics, progress, history
        self.batch_size, self.epoch_size = batch_size, epoch_size
        self.timer, self.last = time.perf_counter(), 0

    def before_train(self) -> None:
        self.timer, self.last = time.perf_counter(), self.trainer.start_iter
        self.progress.start_done, self.progress.started = self.last, self.timer
        self.metrics.start(self.last)  # resumed: drop what a killed run logged after its checkpoint

    def after_train(self) -> None:  # detectron2 calls it on an error too (in a finally): the loggers are flushed
        self.metrics.close(failed=self.trainer.iter < self.trainer.max_iter)

    def after_step(self) -> None:
        storage, done, total = self.trainer.storage, self.trainer.iter + 1, self.trainer.max_iter
        epoch = self.trainer.iter * self.batch_size // self.epoch_size
        lr = storage.history("lr").latest()
        self.progress.update(done, epoch, math.ceil(total * self.batch_size / self.epoch_size),
                             loss=storage.history("total_loss").latest(), lr=lr)
        if done % self.every and done != total:
            return
        window = done - self.last
        names = [k for k in storage.histories() if k.startswith("loss_")]
        values = {"loss": storage.history("total_loss").avg(window),
                  **{k: storage.history(k).avg(window) for k in sorted(names)}}
        seconds = (time.perf_counter() - self.timer) / window
        self.timer, self.last = time.perf_counter(), done
        self.history.append({"iteration": done, "epoch": epoch, **values, "lr": lr, "s_per_iter": seconds})
        self.metrics.write(step=done, epoch=epoch, **values, lr=lr, s_per_iter=seconds)


def _device(name: str) -> torch.device:
    """run.device resolved; under detectron2's launcher (no LOCAL_RANK) CUDA is the GPU it selected."""
    if name in ("auto", "cuda") and torch.cuda.is_available() and distributed.is_distributed() \
            and "LOCAL_RANK" not in os.environ:
        return torch.device("cuda", torch.cuda.current_device())
    return resolve_device(name)


def evaluate(cfg: TransferConfig, weights: str, *, show_progress: bool | str = True,
             extra: dict[str, Any] | None = None, resume: bool = False) -> Path:
    """The protocol for ``cfg.task`` on detectron2; returns the result record's path.

    ``weights``: a checkpoint path (any format :func:`transfer.detection.models.load_resnet` reads) or "random".
    ``resume``: continue from the run directory's last detectron2 checkpoint.
    """
    device = _device(cfg.run.device)
    with distributed.process_group(device), run_dir_lock(transfer_run_dir(cfg), device):
        if distributed.is_distributed() and comm._LOCAL_PROCESS_GROUP is None:  # not started by detectron2's launch
            comm.create_local_process_group(int(os.environ.get("LOCAL_WORLD_SIZE", distributed.world_size())))
        return _run(dataclasses.replace(cfg, engine="detectron2"), weights, device, show_progress, extra or {},
                    resume)


def _run(cfg: TransferConfig, weights: str, device: torch.device, show_progress: bool | str, extra: dict[str, Any],
         resume: bool) -> Path:
    started, s = time.perf_counter(), cfg.solver
    run_dir = transfer_run_dir(cfg)
    if not resume:
        require_fresh(run_dir, ("last_checkpoint",), "a fine-tuning", "pass --resume to continue it, or choose "
                      "another --output-dir")
    else:
        require_same_mode(run_dir)
    cfg, info, data, d2cfg = _setup(cfg, weights, device, run_dir)
    seed_all_rng(cfg.run.seed + distributed.rank())  # torch, numpy (the augmentations) and random
    register_roi_heads()
    model = build_model(d2cfg)
    history: list[dict[str, float]] = []
    trainer, checkpointer = _trainer(cfg, d2cfg, model, device, run_dir, history, show_progress, len(data.train))
    checkpointer.resume_or_load(d2cfg.MODEL.WEIGHTS, resume=resume)
    if resume and checkpointer.has_checkpoint():
        trainer.start_iter = trainer.iter + 1
    elif d2cfg.MODEL.WEIGHTS:
        _check_loaded(model, load_detectron2_pkl(Path(d2cfg.MODEL.WEIGHTS))["model"])
    try:
        trainer.train(trainer.start_iter, s.iterations)
    except FloatingPointError as err:  # detectron2's check of the gathered losses
        raise NonFiniteLossError(f"{str(err).splitlines()[0]} ({cfg.task}, detectron2); lower solver.lr or "
                                 f"lengthen solver.warmup_iters") from None
    train_time = time.perf_counter() - started
    results = _test(cfg, d2cfg, model, data, distributed.is_main() and show_progress)  # (LINE stays LINE)
    if not distributed.is_main():
        return run_dir / "result.json"
    return write_transfer_record(run_dir, cfg, data, info, results, history, engine="detectron2",
                                 details={"detectron2_version": detectron2.__version__,
                                          "world_size": distributed.world_size(), "device": str(device)},
                                 started=started, train_time=train_time, extra=extra)


def _setup(cfg: TransferConfig, weights: str, device: torch.device,
           run_dir: Path) -> tuple[TransferConfig, BackboneInfo, DetectionData, CfgNode]:
    """Check the weights and the data, convert the backbone, register the datasets, write the run files; the config
    comes back with the weights' normalisation in input.mean/std."""
    main, world = distributed.is_main(), distributed.world_size()
    batch = per_process_batch(cfg, world)
    # the whole backbone is checked before the data is read; the detector normalises as the weights expect
    _, info = load_resnet(weights, cfg.detector.arch, cfg.run.weights_format)
    cfg = with_normalisation(cfg, info.normalisation)
    data = load_data(cfg)  # names what is missing from the datasets root before anything trains
    require_a_batch(cfg, data, batch)
    converted = run_dir / "backbone.pkl"
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        if weights != "random":
            convert_file(Path(weights), converted, overwrite=True,  # a resumed run converts again
                         weights_format=cfg.run.weights_format)
    comm.synchronize()  # the others read the converted file
    rle = any(isinstance(a.get("segmentation"), dict) and not a.get("iscrowd") for d in data.train
              for a in d["annotations"])  # crowd objects are not trained on
    d2cfg = build_config(cfg, num_classes=len(data.class_names), arch=info.arch, device=device, output_dir=run_dir,
                         weights="" if weights == "random" else str(converted),
                         mask_format="bitmask" if rle and cfg.detector.mask else "polygon",
                         num_keypoints=len(data.keypoints.names) if data.keypoints else 0,
                         oks_sigmas=tuple(data.oks_sigmas) if data.keypoints else ())
    d2cfg.defrost()
    d2cfg.DATASETS.TRAIN = task_hooks(cfg).register(cfg, data)
    d2cfg.freeze()
    if main:
        write_run_files(run_dir, to_dict(cfg), {"weights": weights, "backbone_format": info.format, "engine":
                                                 "detectron2", "world_size": world, "device": str(device)})
        write_text_atomic(run_dir / "detectron2_config.yaml", d2cfg.dump())
    return cfg, info, data, d2cfg


def _trainer(cfg: TransferConfig, d2cfg: CfgNode, model: nn.Module, device: torch.device, run_dir: Path,
             history: list[dict[str, float]], show_progress: bool | str,
             epoch_size: int) -> tuple[SimpleTrainer, DetectionCheckpointer]:
    """detectron2's trainer over ``model`` with the hooks of its DefaultTrainer that the protocol needs."""
    main = distributed.is_main()
    optimizer = build_optimizer(d2cfg, model)  # SGD; norm weights without weight decay (WEIGHT_DECAY_NORM)

    def loader() -> Any:
        return task_hooks(cfg).train_loader(d2cfg, _augmentations(cfg, train=True))

    with distributed.unsynced_buffers_accepted():
        trained = create_ddp_model(model, broadcast_buffers=False,
                                   device_ids=[device.index] if device.type == "cuda" else None)
    amp = cfg.run.amp and device.type == "cuda"
    trainer = (AMPTrainer(trained, loader(), optimizer, precision=torch.bfloat16) if amp
               else SimpleTrainer(trained, loader(), optimizer))
    # --resume: the checkpoint's optimizer state checked against this optimizer before detectron2 loads it (its
    # own load_state_dict takes another optimizer's groups, and the first step fails in a traceback)
    trainer.load_state_dict = checked_trainer_load(trainer.load_state_dict, optimizer, modules=[model],
                                                   source=f"{run_dir}/last_checkpoint")
    checkpointer = DetectionCheckpointer(trained, str(run_dir), trainer=trainer)
    s = cfg.solver
    metrics = MetricsWriter(run_dir / "metrics.jsonl", enabled=main, loggers=cfg.run.loggers, config=to_dict(cfg),
                            quiet=not show_progress)
    steps = [hooks.IterationTimer(), hooks.LRScheduler(optimizer, build_lr_scheduler(d2cfg, optimizer))]
    if s.precise_bn_iters:  # after the last iteration, before the final checkpoint: the tested statistics
        steps.append(hooks.PreciseBN(0, trained, loader(), s.precise_bn_iters))
    # Deviation from detectron2's defaults: one periodic checkpoint kept besides model_final.pth (our engines'
    # run directories hold one resumable checkpoint).
    steps.append(hooks.PeriodicCheckpointer(checkpointer, cfg.run.checkpoint_every, max_iter=s.iterations,
                                            max_to_keep=1))
    if main:
        progress = Progress(s.iterations, every=cfg.run.log_every, enabled=show_progress)
        steps.append(_Log(every=cfg.run.log_every, metrics=metrics, progress=progress, batch_size=s.batch_size,
                          epoch_size=epoch_size, history=history))
    trainer.register_hooks(steps)
    return trainer, checkpointer


@torch.no_grad()
def _test(cfg: TransferConfig, d2cfg: CfgNode, model: nn.Module, data: DetectionData,
          show_progress: bool | str) -> dict[str, Any]:
    """Predict the test split (each process a shard) and score it on the main process with our metrics (dense
    pose: AP^dp by DensePose's evaluator, box AP by ours)."""
    test_name, task = dataset_name(cfg.data.test), task_hooks(cfg)
    loader = task.test_loader(cfg, d2cfg, test_name, _augmentations(cfg, train=False))
    own = task.evaluator(d2cfg, test_name)
    progress = Progress(len(loader), every=cfg.run.log_every * 5, enabled=show_progress, label="test")
    model.eval()
    records: list[Any] = []
    for step, inputs in enumerate(loader, 1):
        outputs = model(inputs)
        if own is not None:
            own.process(inputs, outputs)
        for sample, output in zip(inputs, outputs, strict=True):
            records += _convert(cfg, data, sample["image_id"], output["instances"].to("cpu"))
        progress.update(step, 0, 1, images=step * len(inputs))
    own_results = task.results(own, cfg, data) if own is not None else {}  # it may gather: every process calls it
    records = [r for part in comm.gather(records) for r in part]
    if not distributed.is_main():
        return {}
    from transfer.detection.metrics import score

    progress.phase(f"test: scoring {len(records)} predictions on {len(data.test)} images ({cfg.task}'s evaluator)")
    scored = score(cfg.task, records, data, masks=cfg.detector.mask)
    progress.clear()
    return {**own_results, **scored}


def _convert(cfg: TransferConfig, data: DetectionData, image_id: Any, instances: Any) -> list[Any]:
    """One image's detections as the torchvision engine's: VOC (class, (image_id, score, x0, y0, x1, y1)); COCO
    result dicts (original category ids, XYWH, masks (detectron2 pastes and thresholds them at 0.5) as RLE,
    keypoints x, y, score)."""
    boxes = instances.pred_boxes.tensor.tolist()
    scores, classes = instances.scores.tolist(), instances.pred_classes.tolist()
    if cfg.task == "voc":
        return [(c, (image_id, score, *box)) for box, score, c in zip(boxes, scores, classes, strict=True)]
    results = [{"image_id": image_id, "category_id": data.contiguous_to_original[c],
                "bbox": [x0, y0, x1 - x0, y1 - y0], "score": score}
               for (x0, y0, x1, y1), score, c in zip(boxes, scores, classes, strict=True)]
    if cfg.task == "keypoints":  # (n, K, 3) x, y, score at pixel centres: back to COCO's indices, as detectron2's
        for result, points in zip(results, instances.pred_keypoints.tolist(), strict=True):  # COCOEvaluator
            result["keypoints"] = [v - 0.5 if k % 3 != 2 else v for k, v in enumerate(sum(points, []))]
    if cfg.detector.mask and results:
        from pycocotools import mask as mask_utils

        masks = instances.pred_masks.numpy().astype(np.uint8)  # (n, H, W)
        for result, rle in zip(results, mask_utils.encode(np.asfortranarray(masks.transpose(1, 2, 0))),
                               strict=True):
            result["segmentation"] = {"size": list(rle["size"]), "counts": rle["counts"].decode("ascii")}
    return results


def _launched(cfg: TransferConfig, weights: str, show_progress: bool | str, resume: bool) -> None:
    evaluate(cfg, weights, show_progress=show_progress, resume=resume)


def launch(cfg: TransferConfig, weights: str, *, num_processes: int, num_machines: int = 1, machine_rank: int = 0,
           dist_url: str = "auto", show_progress: bool | str = True, resume: bool = False) -> None:
    """:func:`evaluate` in ``num_processes`` processes per machine started by detectron2's ``launch`` (one per
    GPU; gloo on CPU). Every machine calls it with the same ``dist_url`` (``tcp://host:port``) and its rank."""
    detectron2_launch(_launched, num_processes, num_machines=num_machines, machine_rank=machine_rank,
                      dist_url=dist_url, args=(cfg, weights, show_progress, resume))
