"""Embedded semantic segmentation data: class masks of the detection scenes, in VOC2012's segmentation layout.

``ensure_semseg()`` writes ``<root>/VOC2012/`` with ``JPEGImages/<id>.jpg`` (the scenes of
:mod:`transfer.embedded`, the same images as the embedded VOC and COCO sets), ``SegmentationClassAug/<id>.png``
(grey PNGs: 0 background, 1 + the shapes class index at every visible pixel of an object, as the COCO masks have
them) and ``ImageSets/Segmentation/{train_aug,val}.txt``, so that the real VOC12 reader runs on them. Written once
into a temporary sibling and renamed into place, regenerated when its ``DONE`` stamp differs (as the scenes).
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from moco_core.data import shapes
from moco_core.data.scenes import class_mask
from transfer.embedded import DEFAULT_SIZE, EMBEDDED_VERSION, JPEG_QUALITY, ensure, scenes

MASKS_VERSION = 1  # bump whenever the masks written here change (the scenes have their own version)
DEFAULT_TRAIN = 400
DEFAULT_VAL = 100


def dataset_version() -> str:
    """The version the record names (part of the evaluation's recipe): "scenes v2, masks v1"."""
    return f"scenes v{EMBEDDED_VERSION}, masks v{MASKS_VERSION}"


def _write(target: Path, counts: dict[str, int], size: int, seed: int) -> None:
    devkit = target / "VOC2012"
    for sub in ("JPEGImages", "SegmentationClassAug", "ImageSets/Segmentation"):
        (devkit / sub).mkdir(parents=True, exist_ok=True)
    for split, scene_split, offset in (("train_aug", "train", 0), ("val", "test", 500000)):
        ids = []
        for n, (image, objects) in enumerate(scenes(scene_split, counts[split], size=size, seed=seed)):
            image_id = f"{offset + n:06d}"
            image.save(devkit / "JPEGImages" / f"{image_id}.jpg", format="JPEG", quality=JPEG_QUALITY)
            Image.fromarray(class_mask(objects, size)).save(devkit / "SegmentationClassAug" / f"{image_id}.png")
            ids.append(image_id)
        listing = devkit / "ImageSets" / "Segmentation" / f"{split}.txt"
        listing.write_text("".join(i + "\n" for i in ids), encoding="utf-8")


def ensure_semseg(root: Path | None = None, *, train: int = DEFAULT_TRAIN, val: int = DEFAULT_VAL,
                  size: int = DEFAULT_SIZE, seed: int = 0) -> Path:
    """A directory holding ``VOC2012/`` of the scenes' class masks; without ``root``:
    ``$MOCO_DATA_HOME/semseg-masks-v{MASKS_VERSION}-scenes-v{EMBEDDED_VERSION}-seed{seed}-{size}px-{train}x{val}``.
    The classes are background and :data:`moco_core.data.shapes.CLASSES`."""
    if root is None:
        root = shapes.data_home() / (f"semseg-masks-v{MASKS_VERSION}-scenes-v{EMBEDDED_VERSION}-seed{seed}-"
                                     f"{size}px-{train}x{val}")
    return ensure("VOC2012", _write, root, {"train_aug": train, "val": val}, size, seed)
