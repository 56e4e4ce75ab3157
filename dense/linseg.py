"""``moco eval linseg``, fast mode: linear semantic segmentation on frozen patch features (issue 59).

1. The patch features of train and val, extracted once and cached in ``<run>/features/`` (:mod:`dense.features`:
   every image resized to ``input.size`` square, labels brought to the patch grid by majority).
2. An L2 logistic regression a patch (:mod:`moco_core.frozen.logreg`, L-BFGS in torch, on the GPU when there is
   one), its strength chosen over ``solver.lambdas`` on a seeded ``solver.heldout`` fraction of the train *images*
   (not patches: a picture's patches are alike, and its held-out patches would flatter the weakest value), by the
   held-out patches' mIoU; then refitted on every train image at the value chosen. Val is never looked at before.
3. Val: each image's patch logits upsampled bilinearly to its label's full resolution, the argmax scored against
   it: mIoU and pixel accuracy from the confusion matrix (:mod:`moco_core.segmentation_metrics`), ignored pixels
   left out.
4. A weighted kNN a patch (``knn.k`` neighbours among the refitted train patches, InstDisc's vote), its votes
   upsampled and scored as the logits are: the record's ``knn`` section, beside the logistic regression's.

Not DINOv2's protocol (its linear head trained by AdamW on 512-px crops, tested by sliding window: the paper
mode, not built yet): the record says ``protocol: linseg-fast``.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from dense.config import LinsegConfig
from dense.data import IGNORE, Split, ade_split, class_names, dataset_root, dataset_version, read_label
from dense.features import DenseView, extract_patches
from moco_core.config import ConfigError
from moco_core.errors import print_warning
from moco_core.frozen.features import (
    FeatureSet,
    cached_features,
    feature_key,
    samples_digest,
    transform_for,
    weights_identity,
)
from moco_core.frozen.logreg import Fit, refit, sweep
from moco_core.model import backbone
from moco_core.model.backbone import load_backbone
from moco_core.model.taps import DenseTaps, default_dense_tap
from moco_core.run.knn import knn_scores
from moco_core.run.records import write_record
from moco_core.run.rundir import require_writable
from moco_core.run.runtime import resolve_device
from moco_core.segmentation_metrics import confusion_matrix, scores

PROTOCOL = "linseg-fast"


def _split_features(model: torch.nn.Module, split: Split, cfg: LinsegConfig, *, tap: str, view: DenseView,
                    weights: dict[str, Any], device: torch.device, cache: Path, progress: bool) -> FeatureSet:
    files = samples_digest(split.root, ((str(p), None) for s in split.samples for p in (s.image, s.label)))
    key = feature_key(weights=weights, transform=view, taps=[tap], amp=cfg.input.amp, device=device,
                      dataset={"root": str(split.root), "split": split.name, "files": files,
                               "num_classes": cfg.data.num_classes})
    return cached_features(cache, key, lambda: extract_patches(
        model, split, tap=tap, view=view, num_classes=cfg.data.num_classes, batch_size=cfg.input.batch_size,
        device=device, amp=cfg.input.amp, progress=progress))


def _draw(rows: torch.Tensor, limit: int, generator: torch.Generator) -> torch.Tensor:
    """``rows`` (indices), at most ``limit`` of them drawn without replacement, in order (0: all)."""
    if not limit or len(rows) <= limit:
        return rows
    return rows[torch.randperm(len(rows), generator=generator)[:limit].sort().values]


def choose_and_fit(train: FeatureSet, tap: str, cfg: LinsegConfig, device: torch.device,
                   names: tuple[str, ...]) -> tuple[Fit, dict, torch.Tensor]:
    """The held-out selection and the refit (step 2 of the module docstring): the classifier, the record's
    ``selection`` and the train rows refitted on (the kNN's bank)."""
    s, k = cfg.solver, cfg.data.num_classes
    x, y, owner = train.features[tap], train.labels[:, 0], train.labels[:, 1]
    images = owner.unique()
    if len(images) < 2:
        raise ConfigError(f"train set: {len(images)} readable image; choosing the L2 strength on held-out train "
                          f"images needs at least 2")
    generator = torch.Generator().manual_seed(cfg.run.seed)
    held = images[torch.randperm(len(images), generator=generator)[:max(1, round(s.heldout * len(images)))]]
    is_held, labelled = torch.isin(owner, held), y != IGNORE
    fit_rows = _draw(torch.nonzero(labelled & ~is_held).squeeze(1), s.max_patches, generator)
    held_rows = torch.nonzero(labelled & is_held).squeeze(1)
    all_rows = _draw(torch.nonzero(labelled).squeeze(1), s.max_patches, generator)
    if not len(fit_rows) or not len(held_rows):
        raise ConfigError("train set: no labelled patch outside (or inside) the held-out images; every label is "
                          "ignored (0)")

    def patch_miou(logits: torch.Tensor, target: torch.Tensor) -> float:
        return float(scores(confusion_matrix(target.cpu(), logits.argmax(1).cpu(), k), names)["mIoU"])

    solver = {"device": device, "precision": s.precision, "max_iter": s.max_iter}
    path = sweep(x[fit_rows], y[fit_rows], x[held_rows], y[held_rows], num_classes=k, score=patch_miou,
                 lambdas=s.lambdas, **solver)
    fit = refit(x[all_rows], y[all_rows], num_classes=k, lam=path.best_lambda, init=path.fits[path.chosen],
                **solver)
    selection = {"on": "held-out train images (patch-grid mIoU)", "images": len(held), "of": len(images),
                 "patches": {"fit": len(fit_rows), "held_out": len(held_rows), "refit": len(all_rows)},
                 "lambda": path.best_lambda, "at_edge": path.at_edge, "curve": path.curve(),
                 "refit": {"iterations": fit.iterations, "converged": fit.converged}}
    return fit, selection, all_rows


def score_val(predict: Callable[[torch.Tensor], torch.Tensor], val: FeatureSet, split: Split, tap: str,
              names: tuple[str, ...], device: torch.device) -> dict[str, Any]:
    """Step 3: each val image's class scores (``predict``: patch features (P, C) -> (P, K)) upsampled to its
    label's size, the argmax against the label."""
    x, owner = val.features[tap], val.labels[:, 1].contiguous()
    num_classes = len(names)
    matrix = torch.zeros(num_classes, num_classes, dtype=torch.long)
    bounds = torch.searchsorted(owner, torch.arange(len(split.samples) + 1))  # rows of image i: a contiguous run
    for index, sample in enumerate(split.samples):
        first, last = int(bounds[index]), int(bounds[index + 1])
        if first == last:  # unreadable when extracted: left out, and counted in the record
            continue
        grid = math.isqrt(last - first)
        logits = predict(x[first:last].to(device)).float()  # (h * w, K)
        label = read_label(sample.label, num_classes)
        logits = logits.t().reshape(1, num_classes, grid, grid)
        full = F.interpolate(logits, size=label.shape, mode="bilinear", align_corners=False)[0]  # (K, H, W)
        matrix += confusion_matrix(label, full.argmax(0).cpu(), num_classes)  # IGNORE (255) is no class: left out
    return scores(matrix, names)


def _knn(sets: dict[str, FeatureSet], bank_rows: torch.Tensor, split: Split, tap: str, names: tuple[str, ...],
         cfg: LinsegConfig, device: torch.device) -> dict[str, Any]:
    """The weighted kNN a patch (the ``knn`` section), its bank the train patches the classifier was refitted on."""
    train = sets["train"]
    bank = F.normalize(train.features[tap][bank_rows].to(device), dim=1)
    labels = train.labels[bank_rows, 0].to(device)

    def votes(patches: torch.Tensor) -> torch.Tensor:
        return knn_scores(F.normalize(patches, dim=1), bank, labels, len(names), k=cfg.knn.k,
                          temperature=cfg.knn.temperature)

    found = score_val(votes, sets["val"], split, tap, names, device)
    return {"k": cfg.knn.k, "temperature": cfg.knn.temperature, "bank": len(bank_rows),
            **{key: found[key] for key in ("mIoU", "pixel_acc", "mean_acc", "per_class_IoU")}}


def linseg(cfg: LinsegConfig, pretrained: str, *, extra: dict[str, Any] | None = None,
           progress: bool = True) -> Path:
    """The fast mode end to end; returns the record written (``<run>/result.json``)."""
    output_dir = Path(str(cfg.run.output_dir))
    require_writable(output_dir)
    device = resolve_device(cfg.run.device)
    root = dataset_root(str(cfg.data.path))
    weights = backbone.read(pretrained, cfg.run.weights_format)
    torch.manual_seed(cfg.run.seed)
    model, info = load_backbone(weights, 1, arch=cfg.arch, crop_size=cfg.input.size, crop_option="--set input.size={}")
    tap = cfg.input.tap or default_dense_tap(model)
    try:
        stride = DenseTaps(model, (tap,)).stride[tap]
    except ValueError as err:
        raise ConfigError(f"input.tap: {err}") from None
    if cfg.input.size % stride:
        raise ConfigError(f"input.size: {cfg.input.size} is not a multiple of the {tap} feature's stride {stride}")
    norm = transform_for(info)
    view = DenseView(cfg.input.size, norm.mean, norm.std)
    splits = {name: ade_split(root, name) for name in ("train", "val")}
    for split in splits.values():
        if split.warning:
            print_warning(split.warning)
    started = time.perf_counter()
    sets = {name: _split_features(model, split, cfg, tap=tap, view=view, weights=weights_identity(info, cfg.run.seed),
                                  device=device, cache=output_dir / "features", progress=progress)
            for name, split in splits.items()}
    extracted = time.perf_counter()
    names = class_names(cfg.data.path == "embedded", cfg.data.num_classes)
    fit, selection, bank_rows = choose_and_fit(sets["train"], tap, cfg, device, names)
    fitted = time.perf_counter()
    result = score_val(fit.scores, sets["val"], splits["val"], tap, names, device)
    knn = _knn(sets, bank_rows, splits["val"], tap, names, cfg, device) if cfg.knn.k else None
    metrics = {"mIoU": result["mIoU"], "pixel_acc": result["pixel_acc"], "mean_acc": result["mean_acc"]}
    embedded = cfg.data.path == "embedded"
    dataset = {"name": "embedded" if embedded else "ADE20K", "path": str(cfg.data.path), "root": str(root),
               **({"version": dataset_version()} if embedded else {}), "num_classes": cfg.data.num_classes,
               **{f"{n}_images": len(s.samples) for n, s in splits.items()},
               "skipped": [s.warning for s in splits.values() if s.warning],
               "unreadable": [u for s in splits.values() for u in s.unreadable]}
    config = {"tap": tap, "stride": stride, "size": cfg.input.size, "labels_to_grid": "majority",
              "upsampling": "bilinear logits", "lambdas": list(cfg.solver.lambdas), "heldout": cfg.solver.heldout,
              "max_patches": cfg.solver.max_patches, "max_iter": cfg.solver.max_iter,
              "precision": cfg.solver.precision, "seed": cfg.run.seed}
    seconds = {"features": extracted - started, "fit": fitted - extracted, "val and knn": time.perf_counter() - fitted,
               "features_cached": all(s.cached for s in sets.values())}
    record = write_record(output_dir / "result.json", task="linseg", protocol=PROTOCOL, metrics=metrics,
                          backbone=info, dataset=dataset, config=config,
                          extra={"selection": selection, "per_class_IoU": result["per_class_IoU"], "knn": knn,
                                 "seconds": seconds, **(extra or {})})
    print(f"linseg ({PROTOCOL}, {tap}): mIoU {metrics['mIoU']:.2f}, pixel accuracy "
          f"{metrics['pixel_acc']:.2f} (lambda {selection['lambda']:g}, chosen on held-out train images)"
          + (f"; kNN (k={cfg.knn.k}): mIoU {knn['mIoU']:.2f}" if knn else ""), file=sys.stderr)
    return record
