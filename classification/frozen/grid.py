"""``moco eval linear --grid``: a grid of linear heads (:mod:`classification.frozen.heads`) trained on one frozen
forward pass a batch, one head chosen on held-out train images (:mod:`classification.frozen.selection`), that head
reported on val and on ImageNet's robustness sets (:mod:`classification.robustness`).

The backbone is read at its taps (:mod:`moco_core.model.taps`) in eval mode under ``torch.no_grad``: BN
statistics never move and no gradient reaches it, and the sanity check at the end (the paper protocol's, from
:mod:`classification.engine`) proves that no backbone tensor changed. Train images are DINOv2's head training
crops (RandomResizedCrop + flip; the paper protocol's train transform); the held-out split, val and the
robustness sets are read as center crops. Each epoch ends with a checkpoint (``grid_last.pth.tar``: the heads, the
optimizer, the history, the RNG), from which ``--resume`` continues; the epochs, the lock, ``--nproc`` (the heads
wrapped in DDP, each rank a shard of every batch) and one-line errors are the paper protocol's (the engine's run,
:mod:`classification.engine`).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, Subset

from classification.engine import Built, EpochDone, EpochProtocol, Words, frozen_reference, run_evaluation, sanity_check
from classification.frozen.grid_config import GridConfig, protocol_name
from classification.frozen.heads import (
    LR_SCALING,
    HeadGrid,
    grid_specs,
    head_hits,
    head_losses,
    head_optimizer,
    scaled_lr,
    set_lr,
)
from classification.frozen.selection import choose, held_out_names, holdout_split
from classification.robustness import ImageSet, RealLabels, find_sets, real_accuracy, restricted_predictions
from classification.splits import SMALL_PRESETS, Splits, dataset_record, load_splits
from moco_core import checkpoint, distributed
from moco_core.commands import checkpoint_name
from moco_core.config import ConfigError, to_dict
from moco_core.data.data import DecodeFailures, ImageDataset
from moco_core.errors import NonFiniteLossError
from moco_core.model import backbone
from moco_core.model.backbone import BackboneInfo, load_backbone
from moco_core.model.taps import FeatureTaps, available_taps, default_tap
from moco_core.model.vit import is_vit
from moco_core.run.features import non_finite_error
from moco_core.run.progress import Progress, format_duration
from moco_core.run.records import write_record
from moco_core.run.rundir import write_text_atomic
from moco_core.run.runtime import autocast

GRID_LAST = checkpoint_name("eval linear", "grid")
# what must not change between a run and its --resume: the heads' shapes and the images they train on
_RESUME_KEYS = ("arch", "grid", "optim", "select", "data")


def grid_eval(cfg: GridConfig, pretrained: str, *, show_progress: bool | str = True,
              extra: dict[str, Any] | None = None, resume: bool = False) -> Path:
    """Train the grid on ``pretrained`` (a checkpoint, a run directory or "random"); returns the record's path."""
    return run_evaluation(cfg, pretrained, "linear_grid", _Grid, show_progress=show_progress, extra=extra,
                          resume=resume)


@dataclass
class _Run:
    """What the epochs of one grid evaluation work with (built by :func:`_set_up`)."""

    model: nn.Module  # the backbone as loaded (its own fc or head never runs)
    info: BackboneInfo
    initial: dict[str, torch.Tensor]  # every backbone tensor as loaded: the sanity check compares against it
    taps: FeatureTaps
    heads: HeadGrid
    trained: nn.Module  # the heads, wrapped in DDP with several processes
    optimizer: torch.optim.Optimizer
    sampler: DistributedSampler
    train_loader: DataLoader
    select_loader: DataLoader | None  # the held-out images (None: selection on val)
    val_loader: DataLoader
    splits: Splits
    selection_split: dict[str, Any]
    held_out: list[str]  # the held-out images' paths relative to the data's folder, sorted (holdout.txt)
    sets: list[ImageSet]
    real: RealLabels | None


class _Grid(EpochProtocol):
    """The grid's part of the engine's run: every head trained on one frozen pass a batch; after the last epoch,
    one head chosen and scored, and the sanity check."""

    words = Words(finished="a finished evaluation", unfinished="an unfinished grid evaluation",
                  hint="pass --resume to continue it, or choose another --output-dir", kind="grid evaluation",
                  verb="evaluates")
    last = GRID_LAST
    format = "moco-linear-grid"
    cfg: GridConfig
    run: _Run

    def set_up(self, failures: DecodeFailures) -> Built:
        self.run = _set_up(self.cfg, self.pretrained, self.device, failures)
        return Built(self.run.info, self.run.optimizer, [self.run.heads], len(self.run.train_loader))

    def require_epochs_left(self, first: int, run_dir: Path) -> None:
        """A finished grid is not extended: its cosine schedule ended with its last epoch."""
        if first >= self.cfg.optim.epochs and (run_dir / "result.json").exists():
            raise ConfigError(f"--resume: {run_dir} holds a finished grid evaluation (its cosine schedule ended at "
                              f"epoch {first}); choose another --output-dir for a new one")

    def write_files(self, run_dir: Path) -> None:
        if self.run.held_out:  # the split is not shipped with the data: kept with the run (its SHA-256 is the record's)
            write_text_atomic(run_dir / "holdout.txt", "\n".join(self.run.held_out))

    def train_epoch(self, epoch: int, step: int, progress: Progress) -> EpochDone:
        cfg, optimizer = self.cfg, self.run.optimizer
        total = cfg.optim.epochs * len(self.run.train_loader)
        step, losses = _train_epoch(cfg, self.run, epoch, step, total, self.device, progress)
        finite = [x for x in losses if math.isfinite(x)]
        if not finite:
            raise NonFiniteLossError(f"every head of the grid diverged by epoch {epoch + 1}; lower grid.lrs")
        diverged = len(losses) - len(finite)
        return EpochDone({"epoch": epoch, "loss": losses,
                          "lr_factor": optimizer.param_groups[0]["lr"] / optimizer.param_groups[0]["start_lr"]},
                         {"step": step, "loss_best": min(finite), "loss_mean": sum(finite) / len(finite),
                          "diverged": diverged},
                         f"head losses {min(finite):.3f} .. {max(finite):.3f}"
                         + (f", {diverged} diverged" if diverged else ""))

    def state(self) -> dict[str, Any]:
        return {"heads": self.run.heads.state_dict()}

    def load_state(self, saved: dict[str, Any], path: Path) -> None:
        now, then = _resumable(to_dict(self.cfg)), _resumable(saved["config"])
        changed = [key for key in _RESUME_KEYS if then.get(key) != now[key]]
        if changed:
            raise ConfigError(f"--resume: {changed[0]} differs from the run in {path.parent} (a grid resumes with the "
                              f"settings it started with)")
        try:
            checkpoint.load_into(self.run.heads, saved.get("heads"))
        except (checkpoint.CheckpointError, RuntimeError, ValueError, KeyError) as err:
            raise checkpoint.CheckpointError(f"{path}: does not match this grid ({str(err).splitlines()[0]})") from None

    def finish(self, history: list[dict[str, Any]], progress: Progress) -> dict[str, Any]:
        result = _select_and_score(self.cfg, self.run, history, self.device, progress)
        sanity_check(self.run.model, self.run.info, self.run.initial)
        return result

    def write_result(self, history: list[dict[str, Any]], result: dict[str, Any], run_dir: Path,
                     started: float) -> Path:
        return _write_result(self.cfg, self.run, history, result, run_dir, started, self.extra)


def _set_up(cfg: GridConfig, pretrained: str, device: torch.device, failures: DecodeFailures) -> _Run:
    """The splits (train less the held-out images), the robustness sets, the frozen backbone, its taps, the heads
    and their optimizer; one-line errors for what cannot run, before any training."""
    world, rank = distributed.world_size(), distributed.rank()
    if cfg.optim.batch_size % world:
        raise ConfigError(f"optim.batch_size: {cfg.optim.batch_size} is not divisible by the {world} processes")
    weights = backbone.read(pretrained, cfg.run.weights_format)  # its normalisation is every view's
    splits = load_splits(cfg.data, augment=True, failures=failures,
                         normalisation=backbone.input_normalisation(weights), fits=SMALL_PRESETS["grid"])
    evaluate = splits.val.transform  # the center crop, for the held-out images, val and the robustness sets
    train, held, record = splits.train.samples, [], {"kind": "val (the reported set)", "images": len(splits.val)}
    if cfg.select.split == "holdout":
        train, held, record = holdout_split(train, cfg.select.holdout_fraction, cfg.select.seed, splits.root)
        if not held:
            raise ConfigError(f"select.holdout_fraction: no class of the {len(splits.train)} train images has 2 "
                              f"images to hold one out; choose on val (select.split=val) or give more images")
    sets, real, missing = [], None, []
    if cfg.robustness.root is not None:
        sets, real, missing = find_sets(Path(cfg.robustness.root).expanduser(), cfg.robustness.sets,
                                        splits.classes, [s for s, _ in splits.val.samples])
    for note in missing if distributed.is_main() else ():
        print(f"note: robustness {note}", file=sys.stderr)
    torch.manual_seed(cfg.run.seed)
    model, info = load_backbone(weights, len(splits.classes), arch=cfg.arch, crop_size=cfg.data.crop_size,
                                crop_option="--set data.crop_size={0} --set data.resize={0}")
    initial = frozen_reference(model, info)
    model = model.to(device).eval().requires_grad_(False)  # frozen: BN in eval mode, no gradient
    try:
        taps = FeatureTaps(model, cfg.grid.taps or (available_taps(model) if is_vit(model) else (default_tap(model),)))
    except ValueError as err:
        raise ConfigError(f"grid.taps: {err}") from None
    heads = HeadGrid(grid_specs(taps.taps, cfg.grid.lrs), taps.dims(cfg.data.crop_size), len(splits.classes))
    heads = heads.to(device)
    optimizer = head_optimizer(heads, cfg.optim.batch_size, momentum=cfg.optim.momentum,
                               weight_decay=cfg.optim.weight_decay)
    local = cfg.optim.batch_size // world
    train_set = ImageDataset(train, splits.train.transform, failures)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=cfg.run.seed)
    train_loader = DataLoader(train_set, batch_size=local, sampler=sampler, num_workers=cfg.data.workers,
                              pin_memory=device.type == "cuda")

    trained: nn.Module = heads
    if world > 1:
        trained = nn.parallel.DistributedDataParallel(heads, device_ids=[device.index] if device.type == "cuda"
                                                      else None)
    names = held_out_names((path for path, _ in held), splits.root)
    return _Run(model, info, initial, taps, heads, trained, optimizer, sampler, train_loader,
                _shard(held, evaluate, failures, local, cfg.data.workers) if held else None,
                _shard(splits.val.samples, evaluate, failures, local, cfg.data.workers), splits, record, names, sets,
                real)


def _shard(samples: list[tuple[str, int]], transform: Any, failures: DecodeFailures | None, batch_size: int,
           workers: int) -> DataLoader:
    """This rank's disjoint share of ``samples`` (every world-th image), read with ``transform``: counts summed
    across ranks are exact."""
    dataset = ImageDataset(samples, transform, failures)
    world, rank = distributed.world_size(), distributed.rank()
    return DataLoader(Subset(dataset, range(rank, len(dataset), world)), batch_size=batch_size, num_workers=workers)


def _features(run: _Run, images: torch.Tensor, device: torch.device, amp: bool,
              finite: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every tap of one batch, from one frozen pass (bf16 under autocast), as fp32 for the heads. ``finite`` (tap ->
    a bool on the device, True to start) is and-ed with whether the batch's features are all finite: no host sync
    a batch; :func:`_require_finite` reads it once at the end of the pass."""
    with torch.no_grad(), autocast(device, amp):
        out = run.taps(images.to(device, non_blocking=True))
    for tap, value in out.items():
        finite[tap] = finite.get(tap, torch.ones((), dtype=torch.bool, device=device)) & torch.isfinite(value).all()
    return {tap: value.float() for tap, value in out.items()}


def _require_finite(finite: dict[str, torch.Tensor], where: str) -> None:
    """A NaN or inf feature (finite weights can give them) would make every head diverge, or score at chance:
    one line naming the taps instead."""
    broken = [tap for tap, ok in finite.items() if not bool(ok)]
    if broken:
        raise non_finite_error(where, broken)


def _train_epoch(cfg: GridConfig, run: _Run, epoch: int, step: int, total: int, device: torch.device,
                 progress: Progress) -> tuple[int, list[float]]:
    """One epoch of every head; (steps done so far, each head's mean loss over the epoch)."""
    run.sampler.set_epoch(epoch)
    summed = torch.zeros(len(run.heads.specs), dtype=torch.float64, device=device)
    batches, finite = 0, {}
    for images, target, _ in run.train_loader:
        factor = set_lr(run.optimizer, step, total)  # cosine per iteration, as DINOv2's scheduler
        features = _features(run, images, device, cfg.run.amp, finite)
        losses = head_losses(run.trained(features), target.to(device))  # (H,)
        run.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        run.optimizer.step()
        summed += losses.detach().double()
        batches += 1
        step += 1
        if progress.enabled and (step % cfg.run.log_every == 0 or step == total):  # .min() syncs: only to show it
            progress.update(step, epoch, cfg.optim.epochs, best_head_loss=losses.detach().nan_to_num(math.inf)
                            .min().item(), lr_factor=factor)
    _require_finite(finite, f"epoch {epoch + 1}'s train images")
    return step, (summed / max(batches, 1)).tolist()


@torch.no_grad()
def _evaluate(run: _Run, loader: DataLoader, device: torch.device, amp: bool,
              keep: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Top-1 and top-5 (%) and the mean cross-entropy of every head over ``loader``'s images, summed across ranks:
    (H, 3); with ``keep``, the top-1 prediction of every head for every image of the dataset, gathered from every
    rank: (N, H) in dataset order."""
    counts = torch.zeros(len(run.heads.specs) + 1, 3, dtype=torch.float64, device=device)  # last row: images
    indices, predictions, finite = [], [], {}
    for images, target, index in loader:
        logits = run.heads(_features(run, images, device, amp, finite))  # (H, N, C)
        target = target.to(device)
        counts[:-1, :2] += head_hits(logits, target)
        counts[:-1, 2] += head_losses(logits, target).double() * target.shape[0]
        counts[-1] += target.shape[0]
        if keep:
            indices.append(index)
            predictions.append(logits.argmax(2).t().cpu())  # (N, H)
    _require_finite(finite, "the scored images")
    if distributed.world_size() > 1:
        torch.distributed.all_reduce(counts)
    kept = None
    if keep:
        parts = distributed.all_gather_objects((torch.cat(indices), torch.cat(predictions)))
        order, predicted = torch.cat([i for i, _ in parts]), torch.cat([p for _, p in parts])
        kept = torch.empty_like(predicted)
        kept[order] = predicted
    scores = counts[:-1] / counts[-1, 0].clamp(min=1)
    scores[:, :2] *= 100.0
    return scores, kept


def _select_and_score(cfg: GridConfig, run: _Run, history: list[dict[str, Any]], device: torch.device,
                      progress: Progress) -> dict[str, Any]:
    """Every head on the selection split and on val; the chosen head; its robustness scores."""
    usable = [math.isfinite(x) for x in history[-1]["loss"]]
    held = None
    if run.select_loader is not None:
        progress.message(f"scoring {len(run.heads.specs)} heads on the {run.selection_split['images']} held-out "
                         f"train images")
        held, _ = _evaluate(run, run.select_loader, device, cfg.run.amp)
    progress.message(f"scoring {len(run.heads.specs)} heads on val")
    val, predictions = _evaluate(run, run.val_loader, device, cfg.run.amp, keep=run.real is not None)
    on = held if held is not None else val
    chosen = choose(on[:, 0].tolist(), usable, on[:, 2].tolist())
    best_on_val = choose(val[:, 0].tolist(), usable, val[:, 2].tolist())
    table = [{"head": spec.name, "tap": spec.tap, "lr": spec.lr,
              "lr_scaled": scaled_lr(spec.lr, cfg.optim.batch_size), "diverged": not usable[i],
              **({"holdout_top1": held[i, 0].item(), "holdout_top5": held[i, 1].item(),
                  "holdout_loss": held[i, 2].item()} if held is not None else {}),
              "val_top1": val[i, 0].item(), "val_top5": val[i, 1].item(), "val_loss": val[i, 2].item()}
             for i, spec in enumerate(run.heads.specs)]
    metrics = {"top1": val[chosen, 0].item(), "top5": val[chosen, 1].item()}
    robustness = _robustness(cfg, run, chosen, predictions, device, progress)
    metrics.update({name: scores["top1"] for name, scores in ((r["metric"], r) for r in robustness.values())})
    return {"metrics": metrics, "table": table, "chosen": chosen, "best_on_val": best_on_val,
            "robustness": robustness}


@torch.no_grad()
def _robustness(cfg: GridConfig, run: _Run, chosen: int, predictions: torch.Tensor | None,
                device: torch.device, progress: Progress) -> dict[str, dict[str, Any]]:
    """The chosen head's top-1 on each robustness set found (the 200-class sets through their class lists) and
    on ReaL's labels of val."""
    spec, head = run.heads.specs[chosen], run.heads.heads[chosen]
    taps = FeatureTaps(run.model, (spec.tap,))
    world = distributed.world_size()
    evaluate = run.splits.val.transform  # the center crop with the weights' normalisation
    out: dict[str, dict[str, Any]] = {}
    for image_set in run.sets:
        progress.message(f"scoring head {spec.name} on {image_set.name} ({len(image_set.samples)} images)")
        loader = _shard(image_set.samples, evaluate, None, cfg.optim.batch_size // world, cfg.data.workers)
        counts = torch.zeros(2, dtype=torch.float64, device=device)
        for images, target, _ in loader:
            with autocast(device, cfg.run.amp):
                features = taps(images.to(device, non_blocking=True))[spec.tap].float()
            predicted = restricted_predictions(head(features), image_set.classes)
            counts += torch.tensor([(predicted == target.to(device)).sum().item(), target.shape[0]], device=device,
                                   dtype=torch.float64)
        if world > 1:
            torch.distributed.all_reduce(counts)
        out[image_set.name] = {"metric": image_set.metric, "path": str(image_set.path),
                               "images": len(image_set.samples),
                               "classes": len(image_set.classes or run.splits.classes),
                               "top1": 100.0 * (counts[0] / counts[1]).item()}
    if run.real is not None and predictions is not None:
        val_order = predictions[:, chosen]  # (N_val,) in val order
        out["imagenet-real"] = {"metric": "imagenet_real_top1", "path": str(run.real.path),
                                "images": len(run.real.labels), "unlabelled_left_out": run.real.unlabelled,
                                "top1": real_accuracy(val_order, run.real)}
    return out


def _write_result(cfg: GridConfig, run: _Run, history: list[dict[str, Any]], result: dict[str, Any],
                  run_dir: Path, started: float, extra: dict[str, Any]) -> Path:
    """The heads, and the record (main process); a summary line."""
    chosen, specs = result["chosen"], run.heads.specs
    checkpoint.save_atomic({"format": "moco-linear-grid-heads", "heads": run.heads.state_dict(),
                            "specs": [(s.tap, s.lr) for s in specs], "chosen": specs[chosen].name,
                            "classes": run.splits.classes, "arch": run.info.arch}, run_dir / "grid_final.pth.tar")
    on = cfg.select.split
    where = (f"chosen on {run.selection_split['images']} train images held out (seed {cfg.select.seed})"
             if on == "holdout" else "chosen on val, the reported set (optimistic: not an honest selection)")
    note = (f"linear head grid ({len(specs)} heads: {len(run.taps.taps)} features x {len(cfg.grid.lrs)} lrs, "
            f"{cfg.optim.epochs} epochs), {where}; not the paper's protocol")
    selection = {"on": "held-out train split" if on == "holdout" else "val (the reported set)",
                 "split": run.selection_split, "chosen": specs[chosen].name,
                 "best_on_val": specs[result["best_on_val"]].name, "lr_scaling": LR_SCALING}
    record = write_record(run_dir / "result.json", task="linear", protocol=protocol_name(cfg),
                          metrics=result["metrics"], backbone=run.info,
                          dataset=dataset_record(cfg.data.path, run.splits), config=to_dict(cfg),
                          history=history,
                          extra={"selection": selection, "grid": result["table"],
                                 "robustness": result["robustness"], "sanity_check": "passed",
                                 "wall_time_s": time.perf_counter() - started, "note": note, **extra})
    robust = " ".join(f"{name} {r['top1']:.2f}" for name, r in result["robustness"].items())
    print(f"{note}: head {specs[chosen].name}: top1 {result['metrics']['top1']:.2f} top5 "
          f"{result['metrics']['top5']:.2f}{'; ' + robust if robust else ''} in "
          f"{format_duration(time.perf_counter() - started)}; sanity check passed", file=sys.stderr)
    return record


def _resumable(config: dict[str, Any]) -> dict[str, Any]:
    """The parts of a config a resumed grid must share with its start (data.workers may differ)."""
    data = {k: v for k, v in (config.get("data") or {}).items() if k != "workers"}
    return {**{k: config.get(k) for k in _RESUME_KEYS}, "data": data}
