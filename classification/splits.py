"""The labelled train and val splits every classification evaluation reads (linear, kNN, fine-tuning), and the
``dataset`` section of their records.

:func:`load_splits` takes any layout :mod:`classification.layouts` knows (ImageFolder with ``val/`` or
``test/``, Flowers-102, Pets), keeps the train images the data config's subset names
(:mod:`classification.subsets`; val is always whole), and :func:`dataset_record` names what ran: the path,
the layout, the folder's content digest, the subset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from classification.layouts import content_digest, find_listed
from classification.subsets import parse_labels, select
from moco_core import distributed
from moco_core.config import ConfigError, cpu_workers
from moco_core.data.augment import build_eval_transform
from moco_core.data.data import (
    DecodeFailures,
    ImageDataset,
    ImageList,
    scan_images,
    unlabelled_splits,
    val_split,
    verify_samples,
    warn_revisited,
    warn_skipped,
)
from moco_core.data.shapes import shapes_version
from moco_core.errors import UserError, print_warning
from moco_core.model.weights.formats import IMAGENET, Normalisation
from moco_core.run.runtime import resolve_data
from moco_core.user_files import regular_file


@dataclass(frozen=True)
class LinearDataConfig:
    path: str | None = None  # ImageFolder root with train/ and val/ (or test/), Flowers-102, Pets, or "embedded"
    crop_size: int = 224  # train: RandomResizedCrop(crop) + flip; val: Resize(resize) + CenterCrop(crop)
    resize: int = 256
    workers: int = field(default_factory=lambda: cpu_workers(8))  # at most the CPUs
    # Semi-supervised subsets of the train split (classification/subsets.py); val stays whole. None: every train image.
    labels: str | None = None  # "1%", "10%": a class-balanced draw, round(f n_c) (at least 1) of each class
    subset: str | None = None  # a file of image names, SimCLR's format (imagenet_subsets/1percent.txt)
    subset_seed: int = 0  # draws data.labels; not run.seed, so trials of other run seeds share the subset


@dataclass
class Splits:
    train: ImageDataset
    val: ImageDataset
    classes: list[str]
    root: Path | None = None
    layout: str = "imagefolder"  # "imagefolder", "imagefolder (test/ as val)", "flowers-102", "oxford-iiit-pet"
    files: list[str] = field(default_factory=list)  # every train and val image found (the content digest's)
    annotations: list[Path] = field(default_factory=list)
    subset: dict[str, Any] | None = None  # what classification.subsets.Subset.record says; None: the whole train split


def train_transform(crop: int, normalisation: Normalisation = IMAGENET) -> Any:
    """The paper's training crops (RandomResizedCrop, flip), normalised as the backbone's weights expect."""
    from torchvision import transforms as T

    return T.Compose([T.RandomResizedCrop(crop), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(normalisation.mean, normalisation.std)])


def load_splits(cfg: LinearDataConfig, *, augment: bool, failures: DecodeFailures | None = None,
                normalisation: Normalisation = IMAGENET, fits: str | None = None) -> Splits:
    """Labelled train and val splits with the same classes. ``augment``: the paper's train crops, else center crops.
    ``failures``: where images that do not decode are noted (else logged once per process). ``normalisation``:
    the input statistics of the weights evaluated (moco_core.model.backbone.input_normalisation). ``fits``: the
    presets a warning names when the images are much smaller than the crops (:func:`small_images`)."""
    root = resolve_data(cfg.path or "")
    train, val, layout, annotations, base = _scan(root, max(cfg.workers, 1))
    notes = [warn_revisited(train.revisited + val.revisited), warn_skipped(train.skipped), warn_skipped(val.skipped),
             small_images(image_sides([s for s, _ in train.samples]), cfg.crop_size, fits) if fits else None]
    subset = select(train.samples, labels=cfg.labels, subset=cfg.subset, seed=cfg.subset_seed,
                    unreadable=[p for p, _ in train.skipped])
    if subset is not None:
        notes.append(subset.warning)
    for note in notes:
        if note and distributed.is_main():
            print_warning(note)
    evaluate = build_eval_transform(cfg.crop_size, resize=cfg.resize, mean=normalisation.mean, std=normalisation.std)
    files = [p for lst in (train, val) for p in [s for s, _ in lst.samples] + [s for s, _ in lst.skipped]]
    return Splits(ImageDataset(subset.samples if subset else train.samples,
                               train_transform(cfg.crop_size, normalisation) if augment else evaluate, failures),
                  ImageDataset(val.samples, evaluate, failures), train.classes, base, layout, files, annotations,
                  subset.record if subset else None)


_AT_128 = "crops of 32 px at batch 128"
# The presets of small images, beside the embedded ones, each with what it changes
SMALL_PRESETS = {"linear": f"-c lincls_32px (MoCo v3 weights: -c lincls_mocov3_32px): {_AT_128}",
                 "knn": f"-c knn_32px: {_AT_128}", "finetune": f"-c finetune_32px: {_AT_128}",
                 "grid": "-c lincls_grid_32px: crops of 32 px, its lrs and batch measured at that scale",
                 "fewshot": "-c lincls_fewshot_32px: center crops of 32 px",
                 "transfer": "-c transfer_32px: center crops of 32 px"}


def image_sides(paths: list[str], *, looked_at: int = 16) -> list[tuple[int, int]]:
    """(width, height) of ``looked_at`` of ``paths``, evenly spaced, by their headers (those that do not open are
    left out): enough to tell small images from large ones without decoding a dataset."""
    from PIL import Image

    sides = []
    for path in paths[:: max(1, len(paths) // looked_at)][:looked_at]:
        try:
            with Image.open(path) as image:
                sides.append(image.size)
        except (OSError, ValueError):
            continue
    return sides


def small_images(sides: list[tuple[int, int]], crop_size: int, fits: str) -> str | None:
    """A warning when the images of ``sides`` ((width, height) each, :func:`image_sides`) are at most half the crop
    size on their longer side: each crop upscales a small image several times (a 32-px image to 224 px is 7x), the
    protocol's batch and schedule are for ImageNet's, and ``fits`` names the presets made for them."""
    if not sides:
        return None
    width, height = max(sides, key=max)
    if 2 * max(width, height) > crop_size:
        return None
    return (f"the images are small ({width}x{height} px and smaller) for this evaluation's {crop_size}-px crops "
            f"(data.crop_size: each upscaled {crop_size / max(width, height):.0f}x, at a batch and schedule made for "
            f"ImageNet); for images this small use {fits}")


def _scan(root: Path, workers: int) -> tuple[ImageList, ImageList, str, list[Path], Path]:
    """(train, val, layout, annotation files, the dataset's folder) of ``root``; every process of a run calls this,
    each reading 1/world of the image headers."""
    listed = find_listed(root) if root.is_dir() else None
    if listed is not None:
        lists = []
        for name, samples in (("train", listed.train), ("test", listed.val)):
            kept, skipped = verify_samples(samples, workers, shared=True)
            if not kept:
                raise ConfigError(f"data.path: none of the {len(samples)} {name} images {listed.kind}'s annotations "
                                  f"name under {listed.root} could be read")
            lists.append(ImageList(kept, listed.classes, skipped))
        return lists[0], lists[1], listed.kind, listed.annotations, listed.root
    split = val_split(root)
    if root.is_dir() and not ((root / split).is_dir() and (root / "train").is_dir()):  # else scan: "not found"
        raise ConfigError(f"data.path: {root} needs train/ and val/ (or test/) folders with one folder per class, "
                          f"or Flowers-102's or Oxford-IIIT Pets' files as torchvision downloads them")
    train = scan_images(root, split="train", workers=workers, shared=True)
    val = scan_images(root, split=split, workers=workers, shared=True)
    problem = unlabelled_splits(root, train, val)
    if problem:
        raise ConfigError(f"data.path: {problem.replace('val/', f'{split}/') if split != 'val' else problem}")
    return train, val, "imagefolder" if split == "val" else "imagefolder (test/ as val)", [], root


def dataset_record(path: str | None, splits: Splits) -> dict[str, Any]:
    """The record's ``dataset``: path, classes, image counts, layout; for a folder its name and content digest
    (:func:`classification.layouts.content_digest`; ``moco report`` groups runs by it), for the embedded data its
    version; the subset trained on, where one was."""
    record: dict[str, Any] = {"path": path, "classes": len(splits.classes), "train_images": len(splits.train),
                              "val_images": len(splits.val), **shapes_version(path or "")}
    if path != "embedded" and splits.root is not None:
        record.update(folder=Path(str(splits.root).rstrip("/")).name or str(splits.root), layout=splits.layout,
                      content_sha256=content_digest(splits.root, splits.files, splits.annotations))
    if splits.subset is not None:
        record["subset"] = splits.subset
    return record


def subset_checks(d: LinearDataConfig) -> list[tuple[bool, str, str]]:
    """The data config's subset options, checked before any image is read (linear, kNN and fine-tuning)."""
    if d.labels is not None:
        parse_labels(d.labels)  # a one-line error naming data.labels
    why = _not_a_file(d.subset) if d.subset is not None else ""
    return [(d.labels is None or d.subset is None, "data.labels",
             "give data.labels (a fraction drawn here) or data.subset (SimCLR's list), not both"),
            (not why, "data.subset", why),
            (d.subset_seed >= 0, "data.subset_seed", f"must be >= 0, got {d.subset_seed}")]


def _not_a_file(path: str) -> str:
    """Why ``path`` is no list to read (missing, a device such as /dev/zero, a FIFO, a folder), or ""."""
    try:
        regular_file(Path(path).expanduser(), what="file")
    except UserError as err:
        return str(err)
    except (OSError, ValueError):  # a NUL byte, a name too long
        return f"{path!r}: no such file"
    return ""
