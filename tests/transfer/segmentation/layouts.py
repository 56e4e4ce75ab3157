"""Tiny semantic segmentation datasets in the real on-disk layouts, down to the file names.

- VOC2012 with SBD's augmented labels (the DeepLab convention): ``VOC2012/JPEGImages/<id>.jpg``,
  ``VOC2012/SegmentationClassAug/<id>.png`` (grey PNGs of class indices, 255 on object borders),
  ``VOC2012/SegmentationClass/<id>.png`` (the official palette PNGs, val and train only) and
  ``VOC2012/ImageSets/Segmentation/{train,val,train_aug}.txt``; the ids are VOC's and SBD's own.
- Cityscapes: ``cityscapes/leftImg8bit/<split>/<city>/<city>_<seq>_<frame>_leftImg8bit.png`` and, in
  ``cityscapes/gtFine/<split>/<city>/``, the ``_gtFine_labelIds.png``, ``_gtFine_instanceIds.png``,
  ``_gtFine_color.png`` and ``_gtFine_polygons.json`` the download has, with the ``_gtFine_labelTrainIds.png`` that
  cityscapesScripts' createTrainIdLabelImgs adds (``train_ids=False``: not made).
- One's own: ``images/<split>/*.jpg`` with ``labels/<split>/*.png``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from transfer.segmentation.datasets import CITYSCAPES_TRAIN_IDS

VOC_TRAIN_AUG = ("2007_000032", "2007_000039", "2008_000002", "2008_000003")  # VOC's and SBD's (2008_000002) ids
VOC_VAL = ("2007_000033", "2007_000042")
CITYSCAPES = {"train": ("aachen_000000_000019", "bochum_000000_000313"), "val": ("frankfurt_000000_000294",)}


def voc_palette() -> list[int]:
    """VOC's colour map (class k's colour from the bits of k), as a flat 768-value PIL palette."""
    palette = []
    for k in range(256):
        r = g = b = 0
        c = k
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        palette += [r, g, b]
    return palette


def _photo(rng: np.random.Generator, height: int, width: int) -> Image.Image:
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def _classes(rng: np.random.Generator, height: int, width: int, values: list[int], ignore: int = 255) -> np.ndarray:
    label = np.zeros((height, width), dtype=np.uint8)
    for value in values:  # rectangles of a class, a border of `ignore` round each (VOC's convention)
        y, x = int(rng.integers(0, height - 8)), int(rng.integers(0, width - 8))
        label[y:y + 8, x:x + 10] = ignore
        label[y + 1:y + 7, x + 1:x + 9] = value
    return label


def voc_segmentation_layout(root: Path, seed: int = 0) -> Path:
    """``root/VOC2012/`` for semantic segmentation (added beside a detection devkit if one is there)."""
    rng = np.random.default_rng(seed)
    devkit = root / "VOC2012"
    for sub in ("JPEGImages", "SegmentationClassAug", "SegmentationClass", "ImageSets/Segmentation"):
        (devkit / sub).mkdir(parents=True, exist_ok=True)
    for n, image_id in enumerate((*VOC_TRAIN_AUG, *VOC_VAL)):
        height, width = 40 + 4 * n, 56
        _photo(rng, height, width).save(devkit / "JPEGImages" / f"{image_id}.jpg")
        label = _classes(rng, height, width, [int(v) for v in rng.integers(1, 21, 2)])
        Image.fromarray(label).save(devkit / "SegmentationClassAug" / f"{image_id}.png")
        if image_id != "2008_000002":  # an SBD image: no official label
            official = Image.frombytes("P", (width, height), label.tobytes())
            official.putpalette(voc_palette())
            official.save(devkit / "SegmentationClass" / f"{image_id}.png")
    lists = {"train_aug": VOC_TRAIN_AUG, "val": VOC_VAL, "train": tuple(i for i in VOC_TRAIN_AUG if i != "2008_000002")}
    for name, ids in lists.items():
        (devkit / "ImageSets" / "Segmentation" / f"{name}.txt").write_text("".join(i + "\n" for i in ids))
    return root


def cityscapes_layout(root: Path, seed: int = 0, train_ids: bool = True) -> Path:
    """``root/cityscapes/`` with leftImg8bit/ and gtFine/ for train and val."""
    rng = np.random.default_rng(seed)
    table = np.asarray(CITYSCAPES_TRAIN_IDS, dtype=np.uint8)
    for split, stems in CITYSCAPES.items():
        for stem in stems:
            city = stem.split("_")[0]
            images = root / "cityscapes" / "leftImg8bit" / split / city
            gt = root / "cityscapes" / "gtFine" / split / city
            images.mkdir(parents=True, exist_ok=True)
            gt.mkdir(parents=True, exist_ok=True)
            _photo(rng, 32, 64).save(images / f"{stem}_leftImg8bit.png")
            label_ids = rng.choice([0, 1, 4, 7, 8, 11, 21, 23, 24, 26, 33], size=(32, 64)).astype(np.uint8)
            Image.fromarray(label_ids).save(gt / f"{stem}_gtFine_labelIds.png")
            Image.fromarray(label_ids.astype(np.uint16) * 1000).save(gt / f"{stem}_gtFine_instanceIds.png")
            Image.fromarray(np.zeros((32, 64, 3), dtype=np.uint8)).save(gt / f"{stem}_gtFine_color.png")
            (gt / f"{stem}_gtFine_polygons.json").write_text(json.dumps({"imgHeight": 32, "imgWidth": 64,
                                                                         "objects": []}))
            if train_ids:
                Image.fromarray(table[label_ids]).save(gt / f"{stem}_gtFine_labelTrainIds.png")
    if train_ids:  # as createTrainIdLabelImgs does, over the whole tree (another fixture's images included)
        for label_file in (root / "cityscapes" / "gtFine").glob("*/*/*_gtFine_labelIds.png"):
            made = label_file.with_name(label_file.name.replace("_labelIds.png", "_labelTrainIds.png"))
            if not made.is_file():
                Image.fromarray(table[np.asarray(Image.open(label_file))]).save(made)
    return root


def custom_segmentation_layout(root: Path, seed: int = 0, classes: int = 3) -> Path:
    """``root/images/{train,val}/*.jpg`` and ``root/labels/{train,val}/*.png`` (values 0..classes-1, 255)."""
    rng = np.random.default_rng(seed)
    for split, count in (("train", 4), ("val", 2)):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for n in range(count):
            _photo(rng, 36, 48).save(root / "images" / split / f"img_{n:03d}.jpg")
            label = _classes(rng, 36, 48, list(range(1, classes)))
            Image.fromarray(label).save(root / "labels" / split / f"img_{n:03d}.png")
    return root
