"""``moco eval linear --shots 1,5 --tries 3``: few-shot linear classification and kNN on a frozen backbone's
features (DINOv3's few-shot evaluation: k labelled images a class, several draws, for linear and kNN readers).

Features of the train and val splits' center crops are computed once, in one pass each, and cached in the run
directory (:mod:`moco_core.frozen.features`, keyed by the weights, the view and the file list), so a rerun
with ``--resume`` reads them back. For each k and each try a k-shot subset of train is drawn
(:mod:`classification.frozen.fewshot`, seeds recorded) and read two ways:

- linear: L2-regularised logistic regression fitted by L-BFGS on the draw (:mod:`moco_core.frozen.logreg`),
  its strength swept over the transfer protocol's 45 values and chosen on images held out from train
  (:mod:`classification.frozen.selection`, as the grid's head; ``select.split: val`` chooses on val, labelled
  so), then scored once on val;
- kNN: InstDisc's weighted vote (k neighbours, weights exp(similarity / T), as ``moco eval knn``) with the draw as
  the bank, scored on val.

The record (task ``fewshot``) gives each k's mean and standard deviation over the tries, and every try's seed,
images, lambda and scores.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from classification.engine import frozen_reference, sanity_check
from classification.frozen import fewshot
from classification.frozen.grid_config import GridConfig, protocol_name
from classification.frozen.metrics import top1
from classification.frozen.selection import holdout_split
from classification.splits import SMALL_PRESETS, dataset_record, load_splits
from moco_core import distributed
from moco_core.config import ConfigError, replace, to_dict
from moco_core.data.data import ImageDataset
from moco_core.frozen.features import (
    cached_features,
    feature_key,
    samples_digest,
    transform_for,
    weights_identity,
)
from moco_core.model import backbone
from moco_core.model.backbone import load_backbone
from moco_core.model.taps import default_tap
from moco_core.run.features import FeatureSet, extract_features
from moco_core.run.knn import knn_scores
from moco_core.run.naming import evaluation_dir
from moco_core.run.progress import LINE
from moco_core.run.records import write_record
from moco_core.run.rundir import require_fresh, require_same_mode, run_dir_lock, write_run_files
from moco_core.run.runtime import resolve_device


def fewshot_eval(cfg: GridConfig, pretrained: str, *, show_progress: bool = True, resume: bool = False,
                 extra: dict[str, Any] | None = None) -> Path:
    """The few-shot evaluation of ``pretrained``; returns the record's path. ``extra``: more top-level fields for
    the record (how it was invoked)."""
    if distributed.world_size() > 1:
        raise ConfigError("--shots runs in one process: features are computed once, on one device")
    device = resolve_device(cfg.run.device)
    if cfg.run.output_dir is None:
        cfg = replace(cfg, run={"output_dir": evaluation_dir(None, "linear_fewshot", pretrained, cfg.arch,
                                                             cfg.data.path)})
    run_dir = Path(cfg.run.output_dir)
    with run_dir_lock(run_dir, device):
        if not resume:
            require_fresh(run_dir, ("result.json",), "a finished evaluation", "choose another --output-dir")
        else:
            require_same_mode(run_dir)
        return _fewshot(cfg, pretrained, device, run_dir, show_progress, extra or {})


def _fewshot(cfg: GridConfig, pretrained: str, device: torch.device, run_dir: Path, show_progress: bool,
             extra: dict[str, Any]) -> Path:
    started = time.perf_counter()
    weights = backbone.read(pretrained, cfg.run.weights_format)
    splits = load_splits(cfg.data, augment=False, normalisation=backbone.input_normalisation(weights),
                         fits=SMALL_PRESETS["fewshot"])
    torch.manual_seed(cfg.run.seed)
    model, info = load_backbone(weights, len(splits.classes), arch=cfg.arch, crop_size=cfg.data.crop_size,
                                crop_option="--set data.crop_size={0} --set data.resize={0}")
    # ImageNet's evaluation view (bilinear), normalised as the weights' method trained
    view = transform_for(info, resize=cfg.data.resize, crop_size=cfg.data.crop_size, interpolation="bilinear")
    initial = frozen_reference(model, info)
    tap = cfg.grid.taps[0] if cfg.grid.taps else default_tap(model)
    write_run_files(run_dir, to_dict(cfg), {"pretrained": pretrained, "backbone_format": info.format,
                                            "world_size": 1, "device": str(device)})

    def features(samples: list[tuple[str, int]], split: str) -> FeatureSet:
        key = feature_key(weights=weights_identity(info, cfg.run.seed), transform=view, taps=(tap,),
                          amp=cfg.run.amp, device=device,
                          dataset={"root": str(splits.root), "split": split,
                                   "files": samples_digest(splits.root or "", samples)})
        return cached_features(run_dir / "features", key, lambda: extract_features(
            model, {split: ImageDataset(samples, view.build())}, taps=(tap,), what=split,
            batch_size=cfg.optim.batch_size, device=device, workers=cfg.data.workers, amp=cfg.run.amp,
            progress=LINE if show_progress else False, timed=bool(show_progress))[split], count=len(samples))

    train, val = features(splits.train.samples, "train"), features(splits.val.samples, "val")
    if cfg.select.split == "holdout":
        kept, held, split_record = holdout_split(splits.train.samples, cfg.select.holdout_fraction, cfg.select.seed,
                                                 splits.root)
        position = {path: i for i, (path, _) in enumerate(splits.train.samples)}
        pool = train.subset([position[p] for p, _ in kept])
        chooser = train.subset([position[p] for p, _ in held])
    else:
        pool, chooser, split_record = train, val, {"kind": "val (the reported set)", "images": len(val)}
    queries = F.normalize(val.features[tap].to(device), dim=1)  # kNN's, the same for every count of shots
    results = [_shots(cfg, k, pool, chooser, val, queries, tap, len(splits.classes), device)
               for k in cfg.fewshot.shots]
    sanity_check(model, info, initial)
    metrics = {f"{r['shots']}shot_{reader}_top1": r[reader]["mean"] for r in results for reader in ("linear", "knn")}
    note = (f"few-shot linear (L2 logistic regression, lambda chosen on "
            f"{'held-out train images' if cfg.select.split == 'holdout' else 'val, the reported set'}) and kNN "
            f"(k {cfg.fewshot.knn_k}, T {cfg.fewshot.knn_temperature}) on {tap} features, {cfg.fewshot.tries} draws "
            f"of each k; not the paper's protocol")
    record = write_record(run_dir / "result.json", task="fewshot", protocol=protocol_name(cfg), metrics=metrics,
                          backbone=info, dataset=dataset_record(cfg.data.path, splits), config=to_dict(cfg),
                          extra={"fewshot": results, "tap": tap, "sanity_check": "passed", "note": note,
                                 "selection": {"on": split_record["kind"], "split": split_record},
                                 "features": {"train": _feature_note(train), "val": _feature_note(val)},
                                 "wall_time_s": time.perf_counter() - started, **extra})
    print(f"{note}: " + ", ".join(f"{r['shots']}-shot linear {r['linear']['mean']:.2f} +- {r['linear']['std']:.2f}, "
                                  f"kNN {r['knn']['mean']:.2f} +- {r['knn']['std']:.2f}" for r in results),
          file=sys.stderr)
    return record


def _feature_note(found: FeatureSet) -> dict[str, Any]:
    return {"images": len(found), "cached": found.cached, "file": found.path.name if found.path else None,
            "seconds": found.seconds}


def _shots(cfg: GridConfig, shots: int, pool: FeatureSet, chooser: FeatureSet, val: FeatureSet,
           queries: torch.Tensor, tap: str, num_classes: int, device: torch.device) -> dict[str, Any]:
    """Both readers on ``cfg.fewshot.tries`` draws of ``shots`` images a class of ``pool``: the same draws.
    ``queries``: val's features at ``tap``, normalised on ``device`` (kNN's)."""
    k = cfg.fewshot
    linear = fewshot.fewshot(pool.features[tap], pool.labels, chooser.features[tap], chooser.labels,
                             val.features[tap], val.labels, shots=shots, tries=k.tries, seed=k.seed,
                             num_classes=num_classes, score=top1, device=device, max_iter=k.max_iter,
                             lambdas=k.lambdas)
    knn = []
    for attempt in linear["runs"]:  # the draws the linear reader fitted, made again from their recorded seeds
        index = fewshot.draw_shots(pool.labels, shots, attempt["seed"])
        bank = F.normalize(pool.features[tap][index].to(device), dim=1)
        scores = knn_scores(queries, bank, pool.labels[index].to(device), num_classes, k=k.knn_k,
                            temperature=k.knn_temperature)
        knn.append({"try": attempt["try"], "seed": attempt["seed"], "images": len(index),
                    "test": top1(scores.cpu(), val.labels)})
    mean, std = fewshot.mean_std([r["test"] for r in knn])
    return {"shots": shots, "linear": {key: linear[key] for key in ("mean", "std", "runs")},
            "knn": {"mean": mean, "std": std, "runs": knn, "k": k.knn_k, "temperature": k.knn_temperature},
            "lambdas": list(k.lambdas)}
