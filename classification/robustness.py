"""ImageNet's robustness test sets in their released layouts, and how an ImageNet classifier is scored on each.

All are found under one folder (``--robustness DIR``: ``robustness.root``), each as its archive extracts:

- ImageNet-V2 matched-frequency (Recht et al., arXiv 1902.10811; ``imagenetv2-matched-frequency.tar.gz``):
  ``imagenetv2-matched-frequency-format-val/<k>/<40 hex digits>.jpeg``, 10 images a class, where the folder name
  ``k`` (0 .. 999) is the class index in ImageNet-1k's order: the sorted WordNet ids, the order of a head trained on
  ``train/<wnid>/``. Folders are read as numbers: sorted as text (torchvision's ImageFolder) "10" would come
  before "2" and every class past 9 would be scored against the wrong label.
- ImageNet-A (Hendrycks et al., arXiv 1907.07174; ``imagenet-a.tar``): ``imagenet-a/<wnid>/<name>.jpg``, 7,500
  images of 200 classes, a ``README.txt`` beside them; names carry spaces (``0.000116_digital clock _ digital
  clock_0.865662.jpg``).
- ImageNet-R (Hendrycks et al., arXiv 2006.16241; ``imagenet-r.tar``): ``imagenet-r/<wnid>/<rendition>_<n>.jpg``
  (``art_0.jpg``, ``cartoon_12.jpg``), 30,000 images of 200 classes, a ``README.txt`` beside them.
- ImageNet-Sketch (Wang et al., arXiv 1905.13549; ``ImageNet-Sketch.zip``): ``sketch/<wnid>/sketch_<n>.JPEG``,
  50,889 images of all 1,000 classes.
- ImageNet-ReaL (Beyer et al., arXiv 2006.07159; google-research/reassessed-imagenet ``real.json``): a JSON list
  whose i-th entry lists the class indices (ImageNet-1k's order) that are correct for ``ILSVRC2012_val_<i+1,
  8 digits>.JPEG``; it is scored on the evaluation's own val split, found by those file names. An empty list (no
  label fits the image) leaves the image out, as the paper's accuracy does.

The 200-class sets are scored as their papers do: the head's 1,000 logits restricted to the set's classes (its
folders), the prediction the best of those. Layouts checked against the tools' ``search`` of public loaders and
the sets' READMEs (2026-11-27); the folder names are the released ones, the file names as the archives hold them.
A set missing under the folder is named in one line and skipped; a set present but not in its layout stops the
run before training, in one line.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from moco_core.config import ConfigError
from moco_core.data.data import is_image_file, show_value
from moco_core.user_files import all_within, read_bytes, within

# name -> (what the folder holds it as, the record's metric)
SETS = {
    "imagenet-v2": ("imagenetv2-matched-frequency-format-val", "imagenet_v2_top1"),
    "imagenet-a": ("imagenet-a", "imagenet_a_top1"),
    "imagenet-r": ("imagenet-r", "imagenet_r_top1"),
    "imagenet-sketch": ("sketch", "imagenet_sketch_top1"),
    "imagenet-real": ("real.json", "imagenet_real_top1"),
}
WNID = re.compile(r"n\d{8}")
VAL_NAME = re.compile(r"ILSVRC2012_val_(\d{8})\.JPEG")
IMAGENET_CLASSES = 1000
REAL_LIMIT = 16 << 20  # the released real.json is about 0.4 MiB


@dataclass(frozen=True)
class ImageSet:
    """A folder set ready to score: (path, the head's class) samples, and the head classes it is scored among
    (None: all of them)."""

    name: str
    path: Path
    samples: list[tuple[str, int]]
    classes: tuple[int, ...] | None

    @property
    def metric(self) -> str:
        return SETS[self.name][1]


@dataclass(frozen=True)
class RealLabels:
    """ReaL's label sets of the val split: ``labels[i]`` for the val sample ``positions[i]`` (its index in the val
    split; only images ReaL labels, i.e. non-empty lists, are kept)."""

    path: Path
    positions: list[int]
    labels: list[list[int]]
    unlabelled: int  # val images whose ReaL list is empty: left out


def find_sets(root: Path, names: tuple[str, ...], head_classes: list[str],
              val_files: list[str]) -> tuple[list[ImageSet], RealLabels | None, list[str]]:
    """The sets ``names`` under ``root`` for a head over ``head_classes`` (its class folders' names, sorted),
    with ``val_files`` the evaluation's val images in order: (folder sets, ReaL labels or None, one line for each
    set that is not there)."""
    unknown = [n for n in names if n not in SETS]
    if unknown:
        raise ConfigError(f"robustness.sets: unknown set {show_value(unknown[0])} (known: {', '.join(SETS)})")
    sets, real, missing = [], None, []
    for name in names:
        path = root / SETS[name][0]
        if not path.exists():
            missing.append(f"{name}: {path} not found, skipped")
        elif name == "imagenet-real":
            within(root, path, what="robustness: ReaL labels", error=ConfigError)
            real = read_real(path, val_files)
        elif name == "imagenet-v2":
            sets.append(ImageSet(name, path, v2_samples(path, len(head_classes)), None))
        else:
            samples, classes = wnid_samples(path, head_classes, name)
            sets.append(ImageSet(name, path, samples, None if name == "imagenet-sketch" else classes))
    return sets, real, missing


def _images(folder: Path) -> list[str]:
    return sorted(str(folder / f) for f in os.listdir(folder) if is_image_file(f) and (folder / f).is_file())


def _confined(path: Path, samples: list[tuple[str, int]]) -> None:
    """A set's images stay inside its folder after links (:func:`moco_core.user_files.all_within`)."""
    all_within(path, (file for file, _ in samples), what="robustness: image", error=ConfigError)


def _class_folders(path: Path, name: str) -> list[Path]:
    """The class folders of a set, each inside ``path`` after links (one linked elsewhere would be a class of
    whatever is there, or of nothing)."""
    if not path.is_dir():
        raise ConfigError(f"robustness: {path} is not a folder ({name}'s layout: one folder per class)")
    folders = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    all_within(path, folders, what="robustness: class folder", error=ConfigError)
    if not folders:
        raise ConfigError(f"robustness: {path} holds no class folders ({name}'s layout)")
    return folders


def v2_samples(path: Path, num_classes: int) -> list[tuple[str, int]]:
    """ImageNet-V2's (image, class) pairs: each folder's name is its class index, read as a number."""
    samples = []
    for folder in _class_folders(path, "imagenet-v2"):
        if not folder.name.isdigit():
            raise ConfigError(f"robustness: imagenet-v2 folder {show_value(folder.name)} in {path} is not a class "
                              f"index (the released layout: folders 0 .. 999)")
        index = int(folder.name)
        if index >= num_classes:
            raise ConfigError(f"robustness: imagenet-v2 folder {folder.name} names class {index}, but the head has "
                              f"{num_classes} classes (ImageNet-V2 needs a head trained on ImageNet-1k's classes)")
        samples += [(file, index) for file in _images(folder)]
    if not samples:
        raise ConfigError(f"robustness: {path} holds no images (imagenet-v2)")
    _confined(path, samples)
    return samples


def wnid_samples(path: Path, head_classes: list[str], name: str) -> tuple[list[tuple[str, int]], tuple[int, ...]]:
    """(image, head class) pairs of a set of ``<wnid>/`` folders, and the head classes its folders name."""
    index = {c: i for i, c in enumerate(head_classes)}
    samples, classes = [], []
    for folder in _class_folders(path, name):
        if folder.name not in index:
            what = "is not a WordNet id" if not WNID.fullmatch(folder.name) else "is not a class of the head"
            raise ConfigError(f"robustness: {name} folder {show_value(folder.name)} in {path} {what} (the head's "
                              f"classes: {', '.join(head_classes[:3])}, ...; {name} needs a head trained on "
                              f"ImageNet's train/<wnid>/ folders)")
        classes.append(index[folder.name])
        samples += [(file, index[folder.name]) for file in _images(folder)]
    if not samples:
        raise ConfigError(f"robustness: {path} holds no images ({name})")
    _confined(path, samples)
    return samples, tuple(classes)


def read_real(path: Path, val_files: list[str]) -> RealLabels:
    """ReaL's label lists for the val images, matched by their ILSVRC-2012 file names. Its indices are
    ImageNet-1k's: a head over fewer classes (the first k) never predicts the others."""
    data = read_bytes(path, limit=REAL_LIMIT, what="robustness: real.json", error=ConfigError)
    try:
        lists = json.loads(data)
    except (ValueError, RecursionError):
        raise ConfigError(f"robustness: {path} is not JSON (ReaL's real.json: a list of label lists)") from None
    if not isinstance(lists, list) or not all(
            isinstance(ls, list) and all(type(c) is int and 0 <= c < IMAGENET_CLASSES for c in ls) for ls in lists):
        raise ConfigError(f"robustness: {path} is not ReaL's layout (a list of lists of class indices 0 .. 999)")
    positions, labels, unlabelled = [], [], 0
    for position, file in enumerate(val_files):
        match = VAL_NAME.fullmatch(os.path.basename(file))
        if not match or not 1 <= int(match[1]) <= len(lists):
            raise ConfigError(f"robustness: ReaL labels ILSVRC-2012's val images by name (ILSVRC2012_val_00000001"
                              f".JPEG .. {len(lists)}); {show_value(os.path.basename(file))} is not one of them")
        found = lists[int(match[1]) - 1]
        if found:
            positions.append(position)
            labels.append(found)
        else:
            unlabelled += 1
    if not labels:
        raise ConfigError(f"robustness: {path} gives none of the {len(val_files)} val images a label")
    return RealLabels(path, positions, labels, unlabelled)


def restricted_predictions(logits: torch.Tensor, classes: tuple[int, ...] | None) -> torch.Tensor:
    """The head's prediction among ``classes`` (None: all): logits (N, C) -> (N,) head class indices. For the
    200-class sets the logits of the other 800 classes are dropped before the argmax, as the sets' papers score."""
    if classes is None:
        return logits.argmax(1)
    index = torch.tensor(classes, device=logits.device)
    return index[logits.index_select(1, index).argmax(1)]


def real_accuracy(predictions: torch.Tensor, real: RealLabels) -> float:
    """ReaL top-1 (%): a prediction (val-order tensor of head classes) is right when ReaL's list for the image
    holds it; images with an empty list were left out already."""
    chosen = predictions[torch.tensor(real.positions, dtype=torch.long)].tolist()
    hits = sum(p in labels for p, labels in zip(chosen, real.labels, strict=True))
    return 100.0 * hits / len(real.labels)
