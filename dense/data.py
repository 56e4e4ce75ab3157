"""The dense probes' segmentation data: ADE20K as released, and an embedded stand-in in the same layout.

ADE20K (SceneParsing, the ``ADEChallengeData2016.zip`` of the MIT benchmark, as mmsegmentation and detectron2 read
it): ``ROOT/ADEChallengeData2016/images/{training,validation}/ADE_{train,val}_%08d.jpg`` with
``annotations/{training,validation}/<same stem>.png``, an 8-bit grey PNG a picture: 0 "other" (ignored in training
and in the score), 1-150 the classes. Labels are shifted by -1 as everyone reads them (mmsegmentation's
``reduce_zero_label``): class k is value k + 1, and 0 becomes :data:`IGNORE` (255). No split list is needed: a
split is every ``.jpg`` of its folder, in name order. A value above the class count is refused where it is read.

``--data embedded`` (:func:`ensure_ade`): the scenes of :mod:`moco_core.data.scenes` (those of the embedded VOC,
COCO and semseg sets) written in that layout, 9 classes (value 1 the background, 2-9 the shapes), generated on
first use under ``$MOCO_DATA_HOME``.

The pairs pass :func:`moco_core.data.pairs.verify_pairs` first (headers only: an empty file, a decompression bomb,
a colour picture as label or a label of another size than its image is skipped with one counted warning); a file
that still fails to decode is skipped where it is read (:func:`read_pair`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps

from moco_core import smoke
from moco_core.data import shapes
from moco_core.data.data import DatasetError
from moco_core.data.image_files import decode_rgb, open_header
from moco_core.data.pairs import LABEL_MODES, Sample, skipped_warning, verify_pairs
from moco_core.data.scenes import DEFAULT_SIZE, EMBEDDED_VERSION, JPEG_QUALITY, class_mask, ensure, scenes
from moco_core.user_files import all_within

ADE_DIR = "ADEChallengeData2016"
ADE_SPLITS = {"train": "training", "val": "validation"}
ADE_PREFIX = {"train": "ADE_train_", "val": "ADE_val_"}
ADE_CLASSES = 150
EMBEDDED_CLASSES = 1 + len(shapes.CLASSES)  # background and the shapes
IGNORE = 255  # what ADE20K's 0 ("other") becomes: left out of training and of the score
ADE_EMBEDDED_VERSION = 1  # bump whenever the files written here change (the scenes have their own version)
DEFAULT_TRAIN, DEFAULT_VAL = 400, 100


@dataclass
class Split:
    """One split's usable pairs, in name order, and the line on those skipped (None: none)."""

    root: Path  # the folder holding ADEChallengeData2016/
    name: str  # "train" or "val"
    samples: list[Sample]
    warning: str | None = None
    unreadable: list[str] = field(default_factory=list)  # pairs that failed to decode when read, with why


def dataset_root(path: str) -> Path:
    """The folder holding ``ADEChallengeData2016/``: ``path``, or the embedded set generated on first use."""
    if path == "embedded":
        sizes = smoke.SCENES["linseg"] if smoke.enabled() else {}
        return ensure_ade(**sizes)
    return Path(os.path.expanduser(path)).absolute()


def ade_split(root: Path, split: str) -> Split:
    """The pairs of ``split`` ("train", "val") under ``root``; DatasetError names what is missing."""
    base = root / ADE_DIR
    images = base / "images" / ADE_SPLITS[split]
    labels = base / "annotations" / ADE_SPLITS[split]
    for folder in (images, labels):
        if not folder.is_dir():
            raise DatasetError(f"{folder}: no such folder (ADE20K as released: {ADE_DIR}/images/{{training,"
                               f"validation}}/*.jpg with annotations/{{training,validation}}/*.png)")
    files = sorted(f for f in images.iterdir() if f.suffix.lower() == ".jpg")
    if not files:
        raise DatasetError(f"{images}: no .jpg images")
    samples = [Sample(f, labels / f"{f.stem}.png") for f in files]
    all_within(images, files, what=f"{images}: image", error=DatasetError)
    all_within(labels, (s.label for s in samples), what=f"{labels}: label", error=DatasetError)
    for sample in samples:
        if not sample.label.is_file():
            raise DatasetError(f"{sample.label}: missing, the label map of {sample.image.name}")
    kept, skipped = verify_pairs(samples, f"{split} set {images}")
    return Split(root, split, kept, skipped_warning(skipped, f"{split} set {images}", len(samples)))


def read_label(path: Path, num_classes: int) -> torch.Tensor:
    """(H, W) int64 classes 0..num_classes-1 and :data:`IGNORE` of an ADE20K label PNG (value v: class v - 1, 0
    ignored); a value above ``num_classes`` is a DatasetError naming the file."""
    with open_header(path) as image:
        if image.mode not in LABEL_MODES:
            raise DatasetError(f"{path}: a {image.mode} image, not a label map (8-bit grey PNG of class values)")
        values = np.asarray(image, dtype=np.uint8)
    if values.size and int(values.max()) > num_classes:
        raise DatasetError(f"{path}: label value {int(values.max())} is beyond the {num_classes} classes (values 1-"
                           f"{num_classes}, 0 ignored)")
    label = torch.from_numpy(values.astype(np.int64)) - 1
    label[label < 0] = IGNORE
    return label


def read_image(path: Path) -> Image.Image:
    """The RGB picture, its EXIF orientation applied (as the pair check measured its size)."""
    with open_header(path) as image:
        return ImageOps.exif_transpose(decode_rgb(image))


def _write_ade(target: Path, counts: dict[str, int], size: int, seed: int) -> None:
    for split, scene_split in (("train", "train"), ("val", "test")):
        images = target / ADE_DIR / "images" / ADE_SPLITS[split]
        labels = target / ADE_DIR / "annotations" / ADE_SPLITS[split]
        images.mkdir(parents=True)
        labels.mkdir(parents=True)
        for n, (image, objects) in enumerate(scenes(scene_split, counts[split], size=size, seed=seed), 1):
            stem = f"{ADE_PREFIX[split]}{n:08d}"
            image.save(images / f"{stem}.jpg", format="JPEG", quality=JPEG_QUALITY)
            Image.fromarray(class_mask(objects, size) + 1).save(labels / f"{stem}.png")  # 0 stays "ignored"


def ensure_ade(root: Path | None = None, *, train: int = DEFAULT_TRAIN, val: int = DEFAULT_VAL,
               size: int = DEFAULT_SIZE, seed: int = 0) -> Path:
    """A folder holding ``ADEChallengeData2016/`` of the embedded scenes; without ``root``:
    ``$MOCO_DATA_HOME/ade-v{ADE_EMBEDDED_VERSION}-scenes-v{EMBEDDED_VERSION}-seed{seed}-{size}px-{train}x{val}``."""
    if root is None:
        root = shapes.data_home() / (f"ade-v{ADE_EMBEDDED_VERSION}-scenes-v{EMBEDDED_VERSION}-seed{seed}-{size}px-"
                                     f"{train}x{val}")
    return ensure(ADE_DIR, _write_ade, root, {"train": train, "val": val}, size, seed,
                  version=f"scenes v{EMBEDDED_VERSION}, ade v{ADE_EMBEDDED_VERSION}")


def class_names(embedded: bool, num_classes: int) -> tuple[str, ...]:
    """The names the record gives the classes: the embedded set's background and shapes, else each class's label
    value (ADE20K's ``objectInfo150.txt`` index: "1" is wall, "150" flag)."""
    if embedded and num_classes == EMBEDDED_CLASSES:
        return ("background", *shapes.CLASSES)
    return tuple(str(value) for value in range(1, num_classes + 1))


def dataset_version() -> str:
    """The embedded set's version, for the record."""
    return f"scenes v{EMBEDDED_VERSION}, ade v{ADE_EMBEDDED_VERSION}"
