"""Linear classification on frozen features: the paper's section 4.1 protocol (official main_lincls.py), and
MoCo v3's (facebookresearch/moco-v3 main_lincls.py).

A new fc (``head`` on a ViT, whose feature is its class token) on the pooled features of a frozen backbone,
trained by SGD. v1/v2's protocol, the defaults below: lr 30, momentum 0.9, wd 0, batch 256, 100 epochs, lr x0.1
at 60 and 80. v3's (presets ``lincls_mocov3`` and ``lincls_mocov3_vit``): lr 0.1 (ResNet) or 3 (ViT) per 256
images, times batch / 256, batch 1024, 90 epochs, a cosine schedule set once per epoch. The whole model stays in
eval mode, so BN statistics never move, and the sanity check at the end proves that nothing but fc changed.
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
from torch.utils.data import DataLoader, DistributedSampler, Subset, TensorDataset

from classification.engine import (
    Built,
    EpochDone,
    EpochProtocol,
    Words,
    evaluate,
    frozen_reference,
    run_evaluation,
    sanity_check,
    scored_epoch,
)
from classification.splits import SMALL_PRESETS, LinearDataConfig, Splits, dataset_record, load_splits, subset_checks
from moco_core import checkpoint, distributed
from moco_core.commands import checkpoint_name
from moco_core.config import ConfigError, Schedule, load_config, replace, require, run_checks, step_schedule, to_dict
from moco_core.data.data import DecodeFailures
from moco_core.errors import NonFiniteLossError
from moco_core.model import backbone
from moco_core.model.backbone import BackboneInfo, load_backbone
from moco_core.model.taps import default_tap
from moco_core.model.vit import VIT_SHAPES, classifier_name
from moco_core.model.weights.formats import format_checks
from moco_core.run.features import extract_features, non_finite_error
from moco_core.run.knn import effective_k
from moco_core.run.progress import Progress, format_duration
from moco_core.run.records import write_record
from moco_core.run.runtime import autocast
from moco_core.run.schedule import short_schedule

LINEAR_LAST = checkpoint_name("eval linear", "linear")  # fc, optimizer, history and RNG after the last epoch


@dataclass(frozen=True)
class LinearOptimConfig:
    lr: float = 30.0  # official main_lincls.py default
    momentum: float = 0.9
    weight_decay: float = 0.0
    batch_size: int = 256  # global, over all processes
    epochs: int = 100
    milestones: tuple[int, ...] = (60, 80)  # step schedule: lr x0.1 at these epochs
    # step (v1/v2's main_lincls.py) or cosine: lr x (1 + cos(pi epoch / epochs)) / 2, set once per epoch (v3's)
    schedule: Literal["step", "cosine"] = "step"
    scale_lr: bool = False  # lr is per 256 images, times batch_size / 256 (v3's main_lincls.py; v1/v2's: not)


@dataclass(frozen=True)
class LinearRunConfig:
    output_dir: str | None = None  # None: runs/<preset>/<weights> (moco_core/run/naming.py)
    device: str = "auto"
    seed: int = 0
    amp: bool = True  # bf16 autocast on CUDA
    log_every: int = 10
    # Not the paper's protocol: features of center crops are extracted once and fc is trained on them (no
    # augmentation). Much faster; results are labelled "linear-cached".
    cached_features: bool = False
    loggers: tuple[str, ...] = ()  # mirrors of metrics.jsonl: "tensorboard", "wandb" (optional extras; README)
    # The method that trained the weights, where their file does not say (moco_core/model/weights/formats.py;
    # --weights-format). None: what the file states; a file that does not say is refused.
    weights_format: str | None = None


@dataclass(frozen=True)
class LinearConfig:
    arch: str | None = None  # None: read from the weights ("random" needs it; default resnet50)
    optim: LinearOptimConfig = field(default_factory=LinearOptimConfig)
    data: LinearDataConfig = field(default_factory=LinearDataConfig)
    run: LinearRunConfig = field(default_factory=LinearRunConfig)

    # lr x0.1 at 60% and 80% of the run, whatever its length (a cosine schedule has no milestones to move)
    SCHEDULES: ClassVar[tuple[Schedule, ...]] = (("optim.epochs", ("optim.milestones",), step_schedule, None),)



def validate_linear(cfg: LinearConfig) -> LinearConfig:
    o, d = cfg.optim, cfg.data
    checks = [
        (o.lr > 0, "optim.lr", f"must be > 0, got {o.lr}"),
        (math.isfinite(o.lr), "optim.lr", f"must be finite, got {o.lr}"),
        (o.batch_size >= 1, "optim.batch_size", f"must be >= 1, got {o.batch_size}"),
        (o.epochs >= 1, "optim.epochs", f"must be >= 1, got {o.epochs}"),
        (o.schedule == "step" or not o.milestones, "optim.milestones", f"{list(o.milestones)}: not used by the "
         f"{o.schedule} schedule; set optim.milestones=[] (or optim.schedule=step)"),
        (all(m < o.epochs for m in o.milestones), "optim.milestones", f"{list(o.milestones)} fall outside a "
         f"{o.epochs}-epoch run (the lr would never drop there): set them below optim.epochs, or leave them out to "
         f"scale the preset's"),
        (o.momentum >= 0 and o.weight_decay >= 0, "optim", "momentum and weight_decay must be >= 0"),
        (d.path is not None, "data.path", "not set: pass --data DIR (with train/ and val/) or --data embedded"),
        (d.crop_size >= 8 and d.resize >= d.crop_size, "data.crop_size", "need 8 <= crop_size <= resize"),
        (d.workers >= 0, "data.workers", f"must be >= 0, got {d.workers}"),
        *subset_checks(d),
        *run_checks(cfg.run.device, cfg.run.seed, cfg.run.loggers),
        *format_checks(cfg.run.weights_format),
    ]
    require(checks)
    return cfg


def load_linear_config(config: str | None, overrides: list[str],
                       flags: dict[str, Any] | None = None) -> LinearConfig:
    """Defaults < YAML < ``--set`` < explicit flags (None: not given), validated once on the result."""
    return validate_linear(load_config(LinearConfig, config, overrides, flags=flags))


# The presets of MoCo v3's protocol by backbone: (ImageNet's, the embedded data's). reports.protocols restates them
# (it imports no other package of ours); tests/reports/test_protocols.py checks that they agree.
MOCOV3_PRESETS = {"resnet": ("lincls_mocov3", "lincls_mocov3_embedded"),
                  "vit": ("lincls_mocov3_vit", "lincls_mocov3_vit_embedded")}


def protocol_preset(pretrained: str, arch: str | None, weights_format: str | None = None) -> str | None:
    """The preset of the protocol the weights' paper evaluates them with, where it is not v1/v2's (the defaults):
    ``lincls_mocov3_vit`` for a ViT (MoCo v3's, the only protocol here for ViTs), ``lincls_mocov3`` for a MoCo
    v3 ResNet; None otherwise. ``weights_format``: as --weights-format (a file that does not say what it is and is
    not named stops here, with the one line that says so)."""
    if pretrained == "random":
        return MOCOV3_PRESETS["vit"][0] if arch in VIT_SHAPES else None
    if not Path(pretrained).exists():
        return None  # the evaluation says so, once the options are checked
    weights = backbone.read(pretrained, weights_format)
    if weights is not None and weights.found.vit is not None:
        return MOCOV3_PRESETS["vit"][0]
    return MOCOV3_PRESETS["resnet"][0] if weights is not None and weights.method == "mocov3" else None


def linear_lr(cfg: LinearOptimConfig, epoch: int) -> float:
    """The lr of ``epoch`` (0-based): step or cosine, from ``lr`` (times batch / 256 with ``scale_lr``)."""
    base = cfg.lr * cfg.batch_size / 256 if cfg.scale_lr else cfg.lr
    if cfg.schedule == "cosine":
        return base * 0.5 * (1.0 + math.cos(math.pi * epoch / cfg.epochs))
    return base * 0.1 ** sum(epoch >= m for m in cfg.milestones)


def classifier(model: nn.Module) -> nn.Linear:
    """The layer linear classification trains: ``fc`` on a ResNet, ``head`` on a ViT."""
    return getattr(model, classifier_name(model))


def freeze_all_but_fc(model: nn.Module) -> list[nn.Parameter]:
    """Freeze every parameter but the classifier's (fc, or a ViT's head); its weight and bias."""
    name = classifier_name(model)
    for key, param in model.named_parameters():
        param.requires_grad_(key in (f"{name}.weight", f"{name}.bias"))
    return [classifier(model).weight, classifier(model).bias]


def linear_eval(cfg: LinearConfig, pretrained: str, *, show_progress: bool | str = True,
                extra: dict[str, Any] | None = None, resume: bool = False) -> Path:
    """Run the protocol on ``pretrained`` (a checkpoint path or "random"); returns the result record's path.

    ``extra``: more top-level fields for the record (a sweep's point, for example). ``resume``: continue from
    the run directory's last epoch (``linear_last.pth.tar``: fc, optimizer, history, RNG; on CPU the result is
    bit-identical to an uninterrupted run), or extend a finished evaluation to more ``optim.epochs``.
    """
    return run_evaluation(cfg, pretrained, "linear", _Linear, show_progress=show_progress, extra=extra, resume=resume)


@dataclass
class _Setup:
    """What the epochs of one evaluation work with (built by :func:`_set_up`)."""

    model: nn.Module  # the backbone with its new fc
    info: BackboneInfo
    initial: dict[str, torch.Tensor]  # a random network's non-fc tensors as built (frozen_reference)
    head: nn.Module  # what is trained and evaluated: the model, or fc alone on cached features
    trained: nn.Module  # the head, wrapped in DDP with several processes
    optimizer: torch.optim.Optimizer
    sampler: DistributedSampler
    train_loader: DataLoader
    val_source: Any
    splits: Splits


class _Linear(EpochProtocol):
    """The protocol's part of the engine's run: fc trained on the frozen network and scored on val each epoch,
    the sanity check after the last."""

    words = Words(finished="a finished linear evaluation", unfinished="an unfinished linear evaluation",
                  hint="pass --resume to continue or extend it, or choose another --output-dir",
                  kind="linear evaluation", verb="evaluates", extended="the evaluation")
    last = LINEAR_LAST
    format = "moco-linear"
    cfg: LinearConfig
    run: _Setup

    def set_up(self, failures: DecodeFailures) -> Built:
        self.run = _set_up(self.cfg, self.pretrained, self.device, failures)
        return Built(self.run.info, self.run.optimizer, [self.run.model], len(self.run.train_loader))

    def train_epoch(self, epoch: int, step: int, progress: Progress) -> EpochDone:
        step, loss, lr = _train_epoch(self.cfg, self.run, epoch, step, self.device, progress)
        acc = evaluate(self.run.head, self.run.val_source, self.device, self.cfg.run.amp,
                       len(self.run.splits.classes))
        return scored_epoch(epoch, step, loss, lr, acc)

    def state(self) -> dict[str, Any]:
        return {"fc": classifier(self.run.model).state_dict()}

    def load_state(self, saved: dict[str, Any], path: Path) -> None:
        try:
            checkpoint.load_into(classifier(self.run.model), saved.get("fc"))
        except checkpoint.CheckpointError as err:
            raise checkpoint.CheckpointError(f"{path}: does not match this evaluation's classifier: {err}") from None

    def finish(self, history: list[dict[str, Any]], progress: Progress) -> None:
        sanity_check(self.run.model, self.run.info, self.run.initial)

    def write_result(self, history: list[dict[str, Any]], result: None, run_dir: Path, started: float) -> Path:
        return _write_result(self.cfg, self.run, history, run_dir, started, self.extra)


def _set_up(cfg: LinearConfig, pretrained: str, device: torch.device, failures: DecodeFailures) -> _Setup:
    """The data, the backbone with a new fc, the optimizer and the loaders; one-line errors for what cannot run."""
    world = distributed.world_size()
    if cfg.optim.batch_size % world:
        raise ConfigError(f"optim.batch_size: {cfg.optim.batch_size} is not divisible by the {world} processes")
    if cfg.run.cached_features and world > 1:
        raise ConfigError("run.cached_features: runs in one process (features are extracted once, on one device)")
    weights = backbone.read(pretrained, cfg.run.weights_format)  # its normalisation is the data's
    splits = load_splits(cfg.data, augment=not cfg.run.cached_features, failures=failures,
                         normalisation=backbone.input_normalisation(weights), fits=SMALL_PRESETS["linear"])
    torch.manual_seed(cfg.run.seed)
    model, info = load_backbone(weights, len(splits.classes), arch=cfg.arch, crop_size=cfg.data.crop_size,
                                crop_option="--set data.crop_size={0} --set data.resize={0}")
    initial = frozen_reference(model, info)
    model = model.to(device)
    optimizer = torch.optim.SGD(freeze_all_but_fc(model), lr=cfg.optim.lr, momentum=cfg.optim.momentum,
                                weight_decay=cfg.optim.weight_decay)
    local_batch = cfg.optim.batch_size // world
    if cfg.run.cached_features:
        train_source, val_source, head = _cached(model, splits, local_batch, cfg, device)
    else:
        # Each rank evaluates a disjoint shard (no padding, unlike DistributedSampler): the summed counts are exact.
        shard = Subset(splits.val, range(distributed.rank(), len(splits.val), world))
        train_source, head = splits.train, model
        val_source = DataLoader(shard, batch_size=local_batch, num_workers=cfg.data.workers)
    sampler = DistributedSampler(train_source, num_replicas=world, rank=distributed.rank(), shuffle=True,
                                 seed=cfg.run.seed)
    train_loader = DataLoader(train_source, batch_size=local_batch, sampler=sampler,
                              num_workers=0 if cfg.run.cached_features else cfg.data.workers,
                              pin_memory=device.type == "cuda")
    trained: nn.Module = head
    if world > 1:
        trained = nn.parallel.DistributedDataParallel(head, device_ids=[device.index] if device.type == "cuda"
                                                      else None)
    note = short_schedule("this linear evaluation", steps_per_epoch=len(train_loader), epochs=cfg.optim.epochs,
                          images=len(splits.train), batch_size=cfg.optim.batch_size)
    if note and distributed.is_main():
        print(note, file=sys.stderr)
    return _Setup(model, info, initial, head, trained, optimizer, sampler, train_loader, val_source, splits)


def _train_epoch(cfg: LinearConfig, run: _Setup, epoch: int, step: int, device: torch.device,
                 progress: Progress) -> tuple[int, float, float]:
    """One epoch of fc training; (steps done so far, last loss, lr). A NaN or inf loss stops the evaluation."""
    lr = linear_lr(cfg.optim, epoch)
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    run.sampler.set_epoch(epoch)
    run.trained.eval()  # BN statistics must not move: fc is trained on the frozen network's features
    # Whether every feature fc read this epoch was finite (on the device: no sync a step): a non-finite loss from
    # non-finite features is the backbone's (broken weights or BN statistics), not the learning rate's
    finite = [torch.ones((), dtype=torch.bool, device=device)]
    watch = classifier(run.model).register_forward_pre_hook(
        lambda _, args: finite.append(finite.pop() & torch.isfinite(args[0]).all()))
    try:
        step, loss = _train_steps(cfg, run, epoch, step, lr, device, progress)
    finally:
        watch.remove()
    if not math.isfinite(loss) and not bool(finite[0]):
        raise non_finite_error("linear training", ["train images, the frozen network's"])
    if not math.isfinite(loss):
        raise NonFiniteLossError(f"linear training diverged (loss {loss}) at epoch {epoch + 1}; lower optim.lr")
    return step, loss, lr


def _train_steps(cfg: LinearConfig, run: _Setup, epoch: int, step: int, lr: float, device: torch.device,
                 progress: Progress) -> tuple[int, float]:
    """The steps of one epoch of fc training; (steps done so far, last loss)."""
    for inputs, target, _ in run.train_loader:
        with autocast(device, cfg.run.amp):
            loss = F.cross_entropy(run.trained(inputs.to(device, non_blocking=True)).float(), target.to(device))
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        run.optimizer.step()
        step += 1
        progress.update(step, epoch, cfg.optim.epochs, loss=loss.item(), lr=lr)
    return step, loss.item()


# MoCo v3's protocol (facebookresearch/moco-v3 main_lincls.py's defaults; its CONFIG.md passes --lr 3 for ViTs)
MOCOV3_PROTOCOL = LinearOptimConfig(lr=0.1, batch_size=1024, epochs=90, milestones=(), schedule="cosine",
                                    scale_lr=True)
MOCOV3_VIT_LR = 3.0


def protocol_name(cfg: LinearConfig) -> str:
    """The record's ``protocol``: "linear" (v1/v2's shape: lr as given, step schedule), "linear-mocov3" (v3's: lr
    per 256 images, cosine), or "linear-cached" (fc trained on features extracted once)."""
    if cfg.run.cached_features:
        return "linear-cached"
    return "linear-mocov3" if cfg.optim.schedule == "cosine" and cfg.optim.scale_lr else "linear"


def protocol_note(cfg: LinearConfig, arch: str | None = None) -> str:
    """What the record and the summary call this run: the paper's protocol (v1/v2's main_lincls.py) or MoCo v3's
    only when the optimisation and crops are that protocol's (v3's lr: 3 for a ViT ``arch``, else 0.1);
    otherwise what differs, so that a 5-epoch check is not taken for the protocol."""
    if cfg.run.cached_features:
        return "not the paper's protocol: fc trained on cached center-crop features"
    if protocol_name(cfg) == "linear-mocov3":
        reference = replace(MOCOV3_PROTOCOL, lr=MOCOV3_VIT_LR if arch in VIT_SHAPES else MOCOV3_PROTOCOL.lr)
        name, whose, family = "the MoCo v3 protocol", "MoCo v3's", "the MoCo v3 linear protocol"
    else:
        reference, name, whose, family = LinearOptimConfig(), "the paper's protocol", "the paper", "the linear protocol"
    paper_data = LinearDataConfig()
    changed = [f"{key} {_shown(getattr(cfg.optim, key))} ({whose}: {_shown(getattr(reference, key))})"
               for key in ("epochs", "milestones", "schedule", "lr", "scale_lr", "batch_size", "momentum",
                           "weight_decay") if getattr(cfg.optim, key) != getattr(reference, key)]
    changed += [f"{key} {getattr(cfg.data, key)} ({whose}: {getattr(paper_data, key)})"
                for key in ("crop_size", "resize") if getattr(cfg.data, key) != getattr(paper_data, key)]
    return name if not changed else f"{family} with " + ", ".join(changed)


def _shown(value: object) -> str:
    return str(list(value)) if isinstance(value, tuple) else str(value)


def _write_result(cfg: LinearConfig, run: _Setup, history: list[dict[str, Any]], run_dir: Path, started: float,
                  extra: dict[str, Any]) -> Path:
    """The final fc and the result record (main process); a summary line."""
    best = max(history, key=lambda h: h["top1"])
    result = {"top1": history[-1]["top1"], "top5": history[-1]["top5"], "best_top1": best["top1"],
              "best_top5": best["top5"], "best_epoch": best["epoch"]}
    checkpoint.save_atomic({"epoch": cfg.optim.epochs, "arch": run.info.arch, "state_dict": run.model.state_dict(),
                            "best_acc1": best["top1"]}, run_dir / "linear_final.pth.tar")
    protocol, note = protocol_name(cfg), protocol_note(cfg, run.info.arch)
    subset = run.splits.subset
    if subset:  # semi-supervised: which of the train labels fc saw
        note += (f", on {subset['images']} of the {subset['of']} train images "
                 f"({subset.get('labels') or subset.get('file')})")
    record = write_record(run_dir / "result.json", task="linear", protocol=protocol, metrics=result,
                          backbone=run.info, dataset=dataset_record(cfg.data.path, run.splits),
                          config=to_dict(cfg), history=history,
                          extra={"sanity_check": "passed", "wall_time_s": time.perf_counter() - started,
                                 "note": note, "topk": effective_k((1, 5), len(run.splits.classes)), **extra})
    print(f"{note}: top1 {result['top1']:.2f} top5 {result['top5']:.2f} (best top1 {best['top1']:.2f} at "
          f"epoch {best['epoch'] + 1}) in {format_duration(time.perf_counter() - started)}; sanity check passed",
          file=sys.stderr)
    return record


class _FeatureHead(nn.Module):
    """fc alone, for cached features: the same parameters as the model's fc, so the sanity check still applies."""

    def __init__(self, fc: nn.Module) -> None:
        super().__init__()
        self.fc = fc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def _cached(model: nn.Module, splits: Splits, batch: int, cfg: LinearConfig,
            device: torch.device) -> tuple[TensorDataset, DataLoader, nn.Module]:
    """Pooled features (a ViT: its class token) of center crops, extracted once; fc is then trained on them."""
    tap = default_tap(model)  # what fc (head) reads
    found = extract_features(model, {"train images": splits.train, "val images": splits.val}, taps=(tap,),
                             what="run.cached_features", batch_size=batch, device=device, workers=cfg.data.workers,
                             amp=cfg.run.amp)
    (train_x, train_y), (val_x, val_y) = ((f.features[tap], f.labels) for f in found.values())
    train = TensorDataset(train_x, train_y, torch.arange(len(train_y)))
    val = DataLoader(TensorDataset(val_x, val_y, torch.arange(len(val_y))), batch_size=batch)
    return train, val, _FeatureHead(classifier(model))
