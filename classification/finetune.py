"""Fine-tuning: the whole backbone and a new fc (a ViT's ``head``) trained end to end, BN trained (arXiv 1911.05722
appendix A.6 iNaturalist, A.7 ImageNet).

Unlike the linear protocol (``classification/linear.py``, whose data config and splits this shares), every layer learns
and the model is in train mode, so BN statistics follow the new data; with several processes BN is synchronised
across them (torch's SyncBatchNorm on CUDA, :class:`moco_core.model.batchnorm.CpuSyncBatchNorm` on CPU).
Augmentation: RandomResizedCrop + flip for training, Resize + CenterCrop for validation. The optimiser is SGD with
a step schedule (the paper's ResNet recipes), or AdamW with a warm-up, a cosine schedule and layer-wise lr decay
(the ViT recipe of MAE, arXiv 2111.06377, section A.3 of its appendix); the lr is set every step.

A run directory holds ``config.yaml``, ``run.json``, ``metrics.jsonl``, ``finetune_last.pth.tar`` (the model,
optimiser, history and RNG after the last epoch: ``--resume`` continues bit-identically on CPU) and, at the end,
``result.json`` (task and protocol ``finetune``).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, Subset

from classification.engine import Built, EpochDone, EpochProtocol, Words, evaluate, run_evaluation, scored_epoch
from classification.linear import protocol_preset
from classification.splits import SMALL_PRESETS, LinearDataConfig, Splits, dataset_record, load_splits, train_transform
from moco_core import checkpoint, distributed
from moco_core.commands import checkpoint_name
from moco_core.config import ConfigError, Schedule, load_config, require, run_checks, step_schedule, to_dict
from moco_core.data.augment import build_eval_transform
from moco_core.data.data import DecodeFailures, ImageDataset
from moco_core.data.inat import inat_splits, is_inat_layout
from moco_core.errors import NonFiniteLossError
from moco_core.model import backbone
from moco_core.model.backbone import BackboneInfo, load_backbone
from moco_core.model.batchnorm import sync_batchnorm_for
from moco_core.model.vit import is_vit
from moco_core.model.weights.formats import IMAGENET, Normalisation, format_checks
from moco_core.run.knn import effective_k
from moco_core.run.progress import Progress, format_duration
from moco_core.run.records import write_record
from moco_core.run.runtime import autocast, resolve_data
from moco_core.run.schedule import short_schedule

FINETUNE_LAST = checkpoint_name("eval finetune")
FINETUNE_VIT_PRESET = "finetune_vit"  # chosen for ViT weights when no -c is given


@dataclass(frozen=True)
class FinetuneOptimConfig:
    """Defaults: ImageNet fine-tuning of a pretrained ResNet-50 (appendix A.7; configs/finetune_imagenet.yaml)."""

    optimizer: Literal["sgd", "adamw"] = "sgd"
    lr: float = 0.03  # A.7: 0.03 for fine-tuning (0.1 from scratch)
    scale_lr: bool = False  # lr is per 256 images, times batch_size / 256 (MAE's and SimCLR's rule)
    momentum: float = 0.9  # SGD
    nesterov: bool = False  # SGD (SimCLR's semi-supervised fine-tuning: true)
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW
    weight_decay: float = 1e-4
    batch_size: int = 256  # global, over all processes
    epochs: int = 90
    milestones: tuple[int, ...] = (30, 60)  # step schedule: lr x0.1 at these epochs
    schedule: Literal["step", "cosine"] = "step"
    warmup_epochs: float = 0.0  # linear warm-up from 0, per step, before the schedule
    min_lr: float = 0.0  # cosine: the lr it ends at
    # ViTs: block i's lr is lr x layer_decay^(depth - i), the patch embedding's layer_decay^(depth + 1), the final
    # norm's and head's lr; 1 (ResNets): one lr for all
    layer_decay: float = 1.0


@dataclass(frozen=True)
class FinetuneRunConfig:
    output_dir: str | None = None  # None: runs/<preset>/<weights> (moco_core/run/naming.py)
    device: str = "auto"
    seed: int = 0
    amp: bool = True  # bf16 autocast on CUDA
    log_every: int = 10
    loggers: tuple[str, ...] = ()  # mirrors of metrics.jsonl: "tensorboard", "wandb"
    weights_format: str | None = None  # the method of weights whose file does not say (--weights-format)


@dataclass(frozen=True)
class FinetuneConfig:
    arch: str | None = None  # None: read from the weights ("random" needs it)
    optim: FinetuneOptimConfig = field(default_factory=FinetuneOptimConfig)
    data: LinearDataConfig = field(default_factory=LinearDataConfig)  # eval linear's: the same data options
    run: FinetuneRunConfig = field(default_factory=FinetuneRunConfig)

    # lr x0.1 at the same fractions of a shortened or lengthened run; the warm-up keeps its fraction too
    SCHEDULES: ClassVar[tuple[Schedule, ...]] = (("optim.epochs", ("optim.milestones",), step_schedule, None),
                                                 ("optim.epochs", ("optim.warmup_epochs",), None, None))



def validate_finetune(cfg: FinetuneConfig) -> FinetuneConfig:
    o, d = cfg.optim, cfg.data
    require([
        (0 < o.lr < math.inf, "optim.lr", f"must be finite and > 0, got {o.lr}"),
        (0 <= o.min_lr < math.inf, "optim.min_lr", f"must be finite and >= 0, got {o.min_lr}"),
        (o.batch_size >= 1, "optim.batch_size", f"must be >= 1, got {o.batch_size}"),
        (o.epochs >= 1, "optim.epochs", f"must be >= 1, got {o.epochs}"),
        (0 <= o.warmup_epochs < o.epochs, "optim.warmup_epochs", f"must be >= 0 and below optim.epochs "
         f"({o.epochs}), got {o.warmup_epochs}"),
        (o.schedule == "step" or not o.milestones, "optim.milestones", f"{list(o.milestones)}: not used by the "
         f"{o.schedule} schedule; set optim.milestones=[] (or optim.schedule=step)"),
        (all(0 < m < o.epochs for m in o.milestones), "optim.milestones", f"{list(o.milestones)} fall outside a "
         f"{o.epochs}-epoch run: set them between 0 and optim.epochs, or leave them out to scale the preset's"),
        (0 < o.layer_decay <= 1, "optim.layer_decay", f"must be in (0, 1], got {o.layer_decay}"),
        (all(0 <= b < 1 for b in o.betas), "optim.betas", f"must be in [0, 1), got {list(o.betas)}"),
        (o.momentum >= 0 and o.weight_decay >= 0, "optim", "momentum and weight_decay must be >= 0"),
        (not o.nesterov or (o.optimizer == "sgd" and o.momentum > 0), "optim.nesterov", "needs optimizer sgd "
         "with momentum > 0"),
        (d.path is not None, "data.path", "not set: pass --data DIR (train/ and val/, or iNaturalist 2018's "
         "layout) or --data embedded"),
        (8 <= d.crop_size <= d.resize, "data.crop_size", f"need 8 <= crop_size <= resize, got {d.crop_size} and "
         f"{d.resize}"),
        (d.workers >= 0, "data.workers", f"must be >= 0, got {d.workers}"),
        *run_checks(cfg.run.device, cfg.run.seed, cfg.run.loggers),
        *format_checks(cfg.run.weights_format),
    ])
    return cfg


def load_finetune_config(config: str | None, overrides: list[str],
                         flags: dict[str, Any] | None = None) -> FinetuneConfig:
    """Defaults < YAML < ``--set`` < explicit flags (None: not given), validated once on the result."""
    return validate_finetune(load_config(FinetuneConfig, config, overrides, flags=flags))


def finetune_preset(pretrained: str, arch: str | None, weights_format: str | None = None) -> str | None:
    """``finetune_vit`` for ViT weights (or 'random' with a ViT arch), where no preset was chosen; else None (the
    defaults: the paper's ResNet recipe)."""
    chosen = protocol_preset(pretrained, arch, weights_format)
    return FINETUNE_VIT_PRESET if chosen is not None and "vit" in chosen else None


def finetune_lr(cfg: FinetuneOptimConfig, progress: float) -> float:
    """The base lr ``progress`` epochs into the run (fractional: it is set every step).

    Warm-up: linear from 0 over ``warmup_epochs``. Then step: x0.1 at each milestone passed; or cosine from the lr
    to ``min_lr`` over the epochs after the warm-up. ``lr`` is per 256 images with ``scale_lr``."""
    base = cfg.lr * cfg.batch_size / 256 if cfg.scale_lr else cfg.lr
    if progress < cfg.warmup_epochs:
        return base * progress / cfg.warmup_epochs
    if cfg.schedule == "cosine":
        done = (progress - cfg.warmup_epochs) / (cfg.epochs - cfg.warmup_epochs)
        return cfg.min_lr + (base - cfg.min_lr) * 0.5 * (1.0 + math.cos(math.pi * done))
    return base * 0.1 ** sum(progress >= m for m in cfg.milestones)


def vit_layer(name: str, depth: int) -> int:
    """The layer of a ViT parameter for layer-wise lr decay: 0 for the patch embedding, class token and position
    embedding; i + 1 for block i; depth + 1 for what follows the blocks (the final norm, the head)."""
    if name.startswith(("cls_token", "pos_embed", "patch_embed", "reg_token")):
        return 0
    if name.startswith("blocks."):
        return int(name.split(".")[1]) + 1
    return depth + 1


def param_groups(model: nn.Module, *, weight_decay: float, layer_decay: float) -> list[dict[str, Any]]:
    """The optimiser's parameter groups, each with ``lr_scale`` (its lr is the schedule's lr times it) and
    ``layer``. A ResNet: one group, weight decay on every parameter (the supervised ResNet recipe the paper
    follows). A ViT: a group per layer (:func:`vit_layer`) and per decay, scale ``layer_decay^(depth + 1 -
    layer)``; no weight decay on biases, norms, the class token or the position embedding (MAE's and DeiT's)."""
    vit = is_vit(model)
    if layer_decay != 1.0 and not vit:
        raise ConfigError(f"optim.layer_decay: {layer_decay} decays the lr per ViT block; a ResNet takes 1.0")
    depth = len(model.blocks) if vit else 0
    groups: dict[tuple[int, bool], dict[str, Any]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:  # a ViT's fixed sin-cos position embedding
            continue
        layer = vit_layer(name, depth) if vit else 0
        decay = not vit or (param.ndim > 1 and name not in ("cls_token", "pos_embed", "reg_token"))
        group = groups.setdefault((layer, decay), {
            "params": [], "weight_decay": weight_decay if decay else 0.0, "layer": layer,
            "lr_scale": layer_decay ** (depth + 1 - layer) if vit else 1.0})
        group["params"].append(param)
    return [groups[key] for key in sorted(groups)]


def build_optimizer(model: nn.Module, cfg: FinetuneOptimConfig) -> torch.optim.Optimizer:
    groups = param_groups(model, weight_decay=cfg.weight_decay, layer_decay=cfg.layer_decay)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas)
    return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr * group["lr_scale"]


def finetune_splits(cfg: LinearDataConfig, failures: DecodeFailures | None = None,
                    normalisation: Normalisation = IMAGENET) -> tuple[Splits, str]:
    """(the labelled splits, the layout): iNaturalist 2018's (``train2018.json``, ``val2018.json``,
    ``train_val2018/``) where the root has its files, else eval linear's (train/ and val/ class folders, or
    "embedded"), with the training crops of the paper, normalised as the weights expect."""
    root = resolve_data(cfg.path or "")
    if not is_inat_layout(root):
        splits = load_splits(cfg, augment=True, failures=failures, normalisation=normalisation,
                             fits=SMALL_PRESETS["finetune"])
        return splits, splits.layout
    train, val, classes = inat_splits(root)
    evaluate_view = build_eval_transform(cfg.crop_size, resize=cfg.resize, mean=normalisation.mean,
                                         std=normalisation.std)
    return Splits(ImageDataset(train, train_transform(cfg.crop_size, normalisation), failures),
                  ImageDataset(val, evaluate_view, failures), classes), "inat2018"


def finetune(cfg: FinetuneConfig, pretrained: str, *, show_progress: bool | str = True,
             extra: dict[str, Any] | None = None, resume: bool = False) -> Path:
    """Fine-tune ``pretrained`` (a checkpoint, a run directory or "random"); returns the result record's path.

    ``resume``: continue from the run directory's last epoch (bit-identical on CPU), or extend a finished run to
    more ``optim.epochs``."""
    return run_evaluation(cfg, pretrained, "finetune", _Finetune, show_progress=show_progress, extra=extra,
                          resume=resume)


@dataclass
class _Setup:
    model: nn.Module  # the backbone with its new fc, in SyncBatchNorm with several processes
    trained: nn.Module  # the model, wrapped in DDP with several processes
    info: BackboneInfo
    optimizer: torch.optim.Optimizer
    sampler: DistributedSampler
    train_loader: DataLoader
    val_loader: DataLoader
    splits: Splits
    layout: str


def _set_up(cfg: FinetuneConfig, pretrained: str, device: torch.device, failures: DecodeFailures) -> _Setup:
    world = distributed.world_size()
    if cfg.optim.batch_size % world:
        raise ConfigError(f"optim.batch_size: {cfg.optim.batch_size} is not divisible by the {world} processes")
    weights = backbone.read(pretrained, cfg.run.weights_format)
    splits, layout = finetune_splits(cfg.data, failures, backbone.input_normalisation(weights))
    torch.manual_seed(cfg.run.seed)
    model, info = load_backbone(weights, len(splits.classes), arch=cfg.arch, crop_size=cfg.data.crop_size,
                                crop_option="--set data.crop_size={0} --set data.resize={0}")
    require_batch_statistics(model, len(splits.train), cfg.optim.batch_size, cfg.data)
    if world > 1:  # BN statistics over the whole batch, as the paper's fine-tuning (SyncBN)
        model = sync_batchnorm_for(nn.SyncBatchNorm.convert_sync_batchnorm(model), device)
    model = model.to(device)
    optimizer = build_optimizer(model, cfg.optim)
    local_batch = cfg.optim.batch_size // world
    sampler = DistributedSampler(splits.train, num_replicas=world, rank=distributed.rank(), shuffle=True,
                                 seed=cfg.run.seed)
    # drop_last: a last batch of one image would stop BN in train mode (and the paper's loaders drop it)
    train_loader = DataLoader(splits.train, batch_size=local_batch, sampler=sampler, num_workers=cfg.data.workers,
                              pin_memory=device.type == "cuda", drop_last=len(splits.train) >= cfg.optim.batch_size)
    # each rank evaluates a disjoint shard (no padding): the summed counts are exact
    shard = Subset(splits.val, range(distributed.rank(), len(splits.val), world))
    val_loader = DataLoader(shard, batch_size=local_batch, num_workers=cfg.data.workers)
    trained: nn.Module = model
    if world > 1:
        trained = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                                      else None)
    note = short_schedule("this fine-tuning", steps_per_epoch=len(train_loader), epochs=cfg.optim.epochs,
                          images=len(splits.train), batch_size=cfg.optim.batch_size,
                          warmup_epochs=cfg.optim.warmup_epochs)
    if note and distributed.is_main():
        print(note, file=sys.stderr)
    return _Setup(model, trained, info, optimizer, sampler, train_loader, val_loader, splits, layout)


def require_batch_statistics(model: nn.Module, images: int, batch_size: int, data: LinearDataConfig) -> None:
    """Fine-tuning trains BatchNorm in train mode, which normalises by the batch's own statistics: a batch of one
    image has none (PyTorch's "Expected more than 1 value per channel" ValueError at the first step, after the
    set-up). The smallest batch is min(images, batch size), drop_last leaving out a short last one, so both must
    be 2 or more; said in one line before training. A network without BatchNorm (a ViT) trains on one image."""
    if not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        return
    why = "fine-tuning trains BatchNorm on each batch's statistics, which needs at least 2 images a batch"
    if batch_size < 2:
        raise ConfigError(f"optim.batch_size: {why}; got {batch_size}")
    if images < 2:
        key = "data.subset" if data.subset else "data.labels" if data.labels else "data.path"
        raise ConfigError(f"{key}: {why}; the training images are {images}: give at least 2")


class _Finetune(EpochProtocol):
    """Fine-tuning's part of the engine's run: the whole model trained and scored on val each epoch."""

    words = Words(finished="a finished fine-tuning", unfinished="an unfinished fine-tuning",
                  hint="pass --resume to continue or extend it, or choose another --output-dir",
                  kind="fine-tuning", verb="fine-tunes", extended="the fine-tuning")
    last = FINETUNE_LAST
    format = "moco-finetune"
    cfg: FinetuneConfig
    run: _Setup

    def set_up(self, failures: DecodeFailures) -> Built:
        self.run = _set_up(self.cfg, self.pretrained, self.device, failures)
        return Built(self.run.info, self.run.optimizer, [self.run.model], len(self.run.train_loader))

    def train_epoch(self, epoch: int, step: int, progress: Progress) -> EpochDone:
        loss, lr = _train_epoch(self.cfg, self.run, epoch, self.device, progress)
        acc = evaluate(self.run.model, self.run.val_loader, self.device, self.cfg.run.amp,
                       len(self.run.splits.classes))
        return scored_epoch(epoch, step + len(self.run.train_loader), loss, lr, acc)

    def state(self) -> dict[str, Any]:
        return {"arch": self.run.info.arch, "model": _plain_state(self.run.model)}

    def load_state(self, saved: dict[str, Any], path: Path) -> None:
        try:
            checkpoint.load_into(self.run.model, saved.get("model"))
        except checkpoint.CheckpointError as err:
            raise checkpoint.CheckpointError(f"{path}: does not match this fine-tuning's model: {err}") from None

    def write_result(self, history: list[dict[str, Any]], result: None, run_dir: Path, started: float) -> Path:
        return _write_result(self.cfg, self.run, history, run_dir, started, self.extra)


def _train_epoch(cfg: FinetuneConfig, run: _Setup, epoch: int, device: torch.device,
                 progress: Progress) -> tuple[float, float]:
    """One epoch of end-to-end training, BN in train mode; (last loss, last lr). A NaN or inf loss stops it."""
    run.sampler.set_epoch(epoch)
    run.trained.train()  # every layer learns, BN statistics included
    steps = len(run.train_loader)
    loss, lr = torch.zeros(()), finetune_lr(cfg.optim, epoch)
    for i, (inputs, target, _) in enumerate(run.train_loader):
        lr = finetune_lr(cfg.optim, epoch + i / steps)
        set_lr(run.optimizer, lr)
        with autocast(device, cfg.run.amp):
            loss = F.cross_entropy(run.trained(inputs.to(device, non_blocking=True)).float(), target.to(device))
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        run.optimizer.step()
        progress.update(epoch * steps + i + 1, epoch, cfg.optim.epochs, loss=loss.item(), lr=lr)
    if not math.isfinite(loss.item()):
        raise NonFiniteLossError(f"fine-tuning diverged (loss {loss.item()}) at epoch {epoch + 1}; lower optim.lr")
    return loss.item(), lr


def _plain_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state_dict with torchvision's / timm's names (SyncBatchNorm's keys are BatchNorm's)."""
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def protocol_note(cfg: FinetuneConfig) -> str:
    """What the record and the summary line call the run: its optimiser and schedule, in a few words."""
    o = cfg.optim
    lr = f"lr {o.lr:g}" + (" per 256" if o.scale_lr else "")
    schedule = f"x0.1 at {list(o.milestones)}" if o.schedule == "step" else "cosine"
    parts = [f"fine-tuning: {o.optimizer} {lr}, {o.epochs} epochs, {schedule}", f"wd {o.weight_decay:g}",
             f"batch {o.batch_size}"]
    if o.warmup_epochs:
        parts.append(f"warm-up {o.warmup_epochs:g} epochs")
    if o.layer_decay != 1.0:
        parts.append(f"layer decay {o.layer_decay:g}")
    return ", ".join(parts)


def _write_result(cfg: FinetuneConfig, run: _Setup, history: list[dict[str, Any]], run_dir: Path,
                  started: float, extra: dict[str, Any]) -> Path:
    best = max(history, key=lambda h: h["top1"])
    result = {"top1": history[-1]["top1"], "top5": history[-1]["top5"], "best_top1": best["top1"],
              "best_top5": best["top5"], "best_epoch": best["epoch"]}
    note = protocol_note(cfg)
    splits = run.splits
    record = write_record(run_dir / "result.json", task="finetune", protocol="finetune", metrics=result,
                          backbone=run.info, dataset={**dataset_record(cfg.data.path, splits),
                                                      "layout": run.layout},
                          config=to_dict(cfg), history=history,
                          extra={"wall_time_s": time.perf_counter() - started, "note": note,
                                 "topk": effective_k((1, 5), len(splits.classes)), **extra})
    print(f"{note}: top1 {result['top1']:.2f} top5 {result['top5']:.2f} (best top1 {best['top1']:.2f} at epoch "
          f"{best['epoch'] + 1}) in {format_duration(time.perf_counter() - started)}", file=sys.stderr)
    return record
