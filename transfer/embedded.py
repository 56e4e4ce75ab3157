"""Tiny detection datasets in the real VOC and COCO layouts, made from the embedded shapes generator.

``ensure_voc()`` writes ``<root>/VOC2007/`` (``Annotations/*.xml``, ``JPEGImages/*.jpg``,
``ImageSets/Main/{trainval,test}.txt``) and ``ensure_coco()`` writes ``<root>/coco/`` (``annotations/
instances_{train,val}2017.json``, ``{train,val}2017/*.jpg``), so the real readers (:mod:`transfer.voc`,
:mod:`transfer.coco`) and the whole transfer protocol run with no download. Shapes ``train`` images make
trainval / train2017, shapes ``val`` images make test / val2017, taken round-robin over the 8 classes so any
count is balanced. Class names are :data:`moco_core.shapes.CLASSES`; COCO category ids are 1, 3, 5, ... (not
contiguous, like COCO's own) so the contiguous-id mapping is exercised.

Images are upscaled by ``scale`` (default 2: 64 -> 128 px, bicubic) with boxes and polygons scaled exactly.
Each image holds one object, 29-48 px at 64 px and 58-96 px at 128: several cells of a stride-16 C4 feature map,
for 4x the pixels of a few hundred small JPEGs (quality 95). (Shapes version 2 also had a small distractor, 8-13
px at 64 px, under the smallest default anchor of 32 px; the scale and the embedded presets were set for it.)

Each dataset directory is written into a temporary sibling and renamed into place; its ``DONE`` file (written
last) holds the version and parameters, and a directory whose ``DONE`` differs is regenerated.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from moco_core import shapes
from moco_core.data import DatasetError

EMBEDDED_VERSION = 1  # bump whenever the files written here change
JPEG_QUALITY = 95
DEFAULT_TRAIN = 400  # trainval / train2017 images (50 per class)
DEFAULT_TEST = 100  # test / val2017 images
DEFAULT_SCALE = 2


def _round_robin(images: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """The first ``count`` images taking one of each class in turn (shapes files are grouped by class)."""
    by_class: dict[int, list[dict[str, Any]]] = {}
    for img in images:
        by_class.setdefault(img["label"], []).append(img)
    groups = [group for _, group in sorted(by_class.items())]
    order = []
    for i in range(max(map(len, groups), default=0)):
        order += [group[i] for group in groups if i < len(group)]
    return order[:count]


def _scaled(img: dict[str, Any], scale: int) -> list[dict[str, Any]]:
    """The image's objects with boxes and polygons multiplied by ``scale``."""
    return [{"category_id": o["category_id"], "bbox": [v * scale for v in o["bbox"]],
             "polygon": [v * scale for v in o["polygon"]]} for o in img["objects"]]


def _save_jpeg(src: Path, dst: Path, scale: int) -> None:
    with Image.open(src) as image:
        rgb = image.convert("RGB")
    if scale != 1:
        rgb = rgb.resize((rgb.width * scale, rgb.height * scale), Image.Resampling.BICUBIC)
    rgb.save(dst, format="JPEG", quality=JPEG_QUALITY)


def _voc_xml(image_id: str, width: int, height: int, objects: list[dict[str, Any]]) -> bytes:
    """A VOC annotation: boxes as the 1-based inclusive pixels covering the continuous box."""
    root = ET.Element("annotation")
    ET.SubElement(root, "folder").text = "VOC2007"
    ET.SubElement(root, "filename").text = f"{image_id}.jpg"
    size = ET.SubElement(root, "size")
    for tag, value in (("width", width), ("height", height), ("depth", 3)):
        ET.SubElement(size, tag).text = str(value)
    ET.SubElement(root, "segmented").text = "0"
    for obj in objects:
        x0, y0, x1, y1 = obj["bbox"]
        node = ET.SubElement(root, "object")
        ET.SubElement(node, "name").text = shapes.CLASSES[obj["category_id"]]
        ET.SubElement(node, "pose").text = "Unspecified"
        ET.SubElement(node, "truncated").text = "0"
        ET.SubElement(node, "difficult").text = "0"
        box = ET.SubElement(node, "bndbox")
        # pixel columns floor(x0)..ceil(x1)-1 (0-based) are xmin..xmax in 1-based inclusive numbering
        xmin, ymin = int(np.floor(x0)) + 1, int(np.floor(y0)) + 1
        xmax, ymax = max(int(np.ceil(x1)), xmin), max(int(np.ceil(y1)), ymin)
        for tag, value in (("xmin", xmin), ("ymin", ymin), ("xmax", min(xmax, width)), ("ymax", min(ymax, height))):
            ET.SubElement(box, tag).text = str(value)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8")


def _write_voc(target: Path, source: Path, counts: dict[str, int], scale: int) -> None:
    voc = target / "VOC2007"
    for sub in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (voc / sub).mkdir(parents=True, exist_ok=True)
    for split, shapes_split, offset in (("trainval", "train", 0), ("test", "val", 500000)):
        chosen = _round_robin(shapes.load_annotations(source, shapes_split)["images"], counts[split])
        ids = []
        for n, img in enumerate(chosen):
            image_id = f"{offset + n:06d}"
            _save_jpeg(source / img["file"], voc / "JPEGImages" / f"{image_id}.jpg", scale)
            xml = _voc_xml(image_id, img["width"] * scale, img["height"] * scale, _scaled(img, scale))
            (voc / "Annotations" / f"{image_id}.xml").write_bytes(xml)
            ids.append(image_id)
        (voc / "ImageSets" / "Main" / f"{split}.txt").write_text("".join(i + "\n" for i in ids), encoding="utf-8")


def _polygon_area(flat: list[float]) -> float:
    """Shoelace area of a flat [x, y, x, y, ...] polygon (the mask's area up to rasterisation)."""
    x, y = np.asarray(flat[0::2]), np.asarray(flat[1::2])
    return float(abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2.0)


def _write_coco(target: Path, source: Path, counts: dict[str, int], scale: int) -> None:
    coco = target / "coco"
    (coco / "annotations").mkdir(parents=True, exist_ok=True)
    categories = [{"id": 2 * i + 1, "name": name, "supercategory": "shape"} for i, name in enumerate(shapes.CLASSES)]
    for split, shapes_split in (("train2017", "train"), ("val2017", "val")):
        (coco / split).mkdir()
        chosen = _round_robin(shapes.load_annotations(source, shapes_split)["images"], counts[split])
        images, annotations = [], []
        for n, img in enumerate(chosen, 1):
            file_name = f"{n:012d}.jpg"
            _save_jpeg(source / img["file"], coco / split / file_name, scale)
            images.append({"id": n, "file_name": file_name, "width": img["width"] * scale,
                           "height": img["height"] * scale})
            for obj in _scaled(img, scale):
                x0, y0, x1, y1 = obj["bbox"]
                annotations.append({"id": len(annotations) + 1, "image_id": n,
                                    "category_id": 2 * obj["category_id"] + 1, "bbox": [x0, y0, x1 - x0, y1 - y0],
                                    "segmentation": [obj["polygon"]], "area": _polygon_area(obj["polygon"]),
                                    "iscrowd": 0})
        doc = {"info": {"description": f"moco embedded shapes, COCO layout v{EMBEDDED_VERSION}"},
               "images": images, "annotations": annotations, "categories": categories}
        with open(coco / "annotations" / f"instances_{split}.json", "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))


def _ensure(name: str, write: Callable[[Path, Path, dict[str, int], int], None], root: Path | None,
            counts: dict[str, int], scale: int, shapes_root: Path | None) -> Path:
    """Make ``root/name`` with ``write`` unless its ``DONE`` already matches; returns ``root``."""
    if min(counts.values()) < 1 or scale < 1:
        raise ValueError(f"image counts and scale must be >= 1, got {counts} and scale={scale}")
    source = shapes.ensure_shapes(shapes_root)
    if root is None:
        home = shapes.data_home()
        sizes = "x".join(str(v) for v in counts.values())
        root = home / f"{source.name}-detection-v{EMBEDDED_VERSION}-{sizes}-scale{scale}"
    root = Path(root)
    stamp = json.dumps({"version": EMBEDDED_VERSION, "shapes": str(source.resolve()), "scale": scale, **counts},
                       sort_keys=True) + "\n"
    target = root / name
    if _read(target / "DONE") == stamp:
        return root
    try:
        return _write_into(root, name, write, source, counts, scale, stamp)
    except OSError as err:
        raise DatasetError(f"cannot write the embedded {name} dataset in {root}: {err.strerror or err} (set "
                           f"MOCO_DATA_HOME to a writable folder)") from None


def _write_into(root: Path, name: str, write: Callable[[Path, Path, dict[str, int], int], None], source: Path,
                counts: dict[str, int], scale: int, stamp: str) -> Path:
    target = root / name
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=root))
    try:
        write(tmp, source, counts, scale)
        (tmp / name / "DONE").write_text(stamp, encoding="utf-8")
        if _read(target / "DONE") == stamp:  # another process finished first
            return root
        if target.exists():  # stale version or other parameters
            shutil.rmtree(target)
        os.replace(tmp / name, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def ensure_voc(root: Path | None = None, *, trainval: int = DEFAULT_TRAIN, test: int = DEFAULT_TEST,
               scale: int = DEFAULT_SCALE, shapes_root: Path | None = None) -> Path:
    """A directory holding ``VOC2007/`` made from shapes (``shapes_root``, or ``ensure_shapes()``'s default).

    Without ``root``: ``$MOCO_DATA_HOME/<shapes dir>-detection-v{EMBEDDED_VERSION}-{trainval}x{test}-scale{scale}``.
    Counts above the shapes split's size are capped at it.
    """
    return _ensure("VOC2007", _write_voc, root, {"trainval": trainval, "test": test}, scale, shapes_root)


def ensure_coco(root: Path | None = None, *, train: int = DEFAULT_TRAIN, val: int = DEFAULT_TEST,
                scale: int = DEFAULT_SCALE, shapes_root: Path | None = None) -> Path:
    """A directory holding ``coco/`` made from shapes; as :func:`ensure_voc` (same default root)."""
    return _ensure("coco", _write_coco, root, {"train2017": train, "val2017": val}, scale, shapes_root)
