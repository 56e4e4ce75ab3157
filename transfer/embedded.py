"""Embedded detection data in the real VOC and COCO layouts: the generated scenes of
:mod:`moco_core.data.scenes` (how they are drawn is said there).

``ensure_voc()`` writes ``<root>/VOC2007/`` (``Annotations/*.xml``, ``JPEGImages/*.jpg``,
``ImageSets/Main/{trainval,test}.txt``) and ``ensure_coco()`` writes ``<root>/coco/`` (``annotations/
instances_{train,val}2017.json``, ``{train,val}2017/*.jpg``), so the real readers (:mod:`transfer.detection.voc`,
:mod:`transfer.detection.coco`) and the whole transfer protocol run with no download. Both hold the same scenes:
trainval is train2017, test is val2017. Class names are :data:`moco_core.data.shapes.CLASSES`; COCO category ids are
1, 3, 5, ... (not contiguous, like COCO's own) so the contiguous-id mapping is exercised.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
from pycocotools import mask as mask_utils

from moco_core.data import shapes
from moco_core.data.scenes import (
    DEFAULT_SIZE,
    DEFAULT_TEST,
    DEFAULT_TRAIN,
    EMBEDDED_VERSION,
    JPEG_QUALITY,
    ensure,
    scenes,
)


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


def _write_voc(target: Path, counts: dict[str, int], size: int, seed: int) -> None:
    voc = target / "VOC2007"
    for sub in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (voc / sub).mkdir(parents=True, exist_ok=True)
    for split, scene_split, offset in (("trainval", "train", 0), ("test", "test", 500000)):
        ids = []
        for n, (image, objects) in enumerate(scenes(scene_split, counts[split], size=size, seed=seed)):
            image_id = f"{offset + n:06d}"
            image.save(voc / "JPEGImages" / f"{image_id}.jpg", format="JPEG", quality=JPEG_QUALITY)
            (voc / "Annotations" / f"{image_id}.xml").write_bytes(_voc_xml(image_id, size, size, objects))
            ids.append(image_id)
        (voc / "ImageSets" / "Main" / f"{split}.txt").write_text("".join(i + "\n" for i in ids), encoding="utf-8")


def rle(mask: np.ndarray) -> dict[str, Any]:
    """A bool mask as COCO's compressed RLE, ``counts`` a str (JSON-ready)."""
    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}


def _write_coco(target: Path, counts: dict[str, int], size: int, seed: int) -> None:
    coco = target / "coco"
    (coco / "annotations").mkdir(parents=True, exist_ok=True)
    categories = [{"id": 2 * i + 1, "name": name, "supercategory": "shape"} for i, name in enumerate(shapes.CLASSES)]
    for split, scene_split in (("train2017", "train"), ("val2017", "test")):
        (coco / split).mkdir()
        images, annotations = [], []
        for n, (image, objects) in enumerate(scenes(scene_split, counts[split], size=size, seed=seed), 1):
            file_name = f"{n:012d}.jpg"
            image.save(coco / split / file_name, format="JPEG", quality=JPEG_QUALITY)
            images.append({"id": n, "file_name": file_name, "width": size, "height": size})
            for obj in objects:
                x0, y0, x1, y1 = obj["bbox"]
                annotations.append({"id": len(annotations) + 1, "image_id": n,
                                    "category_id": 2 * obj["category_id"] + 1, "bbox": [x0, y0, x1 - x0, y1 - y0],
                                    "segmentation": rle(obj["mask"]), "area": float(obj["mask"].sum()),
                                    "iscrowd": 0})
        doc = {"info": {"description": f"moco embedded scenes, COCO layout v{EMBEDDED_VERSION}"},
               "images": images, "annotations": annotations, "categories": categories}
        with open(coco / "annotations" / f"instances_{split}.json", "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))


def ensure_voc(root: Path | None = None, *, trainval: int = DEFAULT_TRAIN, test: int = DEFAULT_TEST,
               size: int = DEFAULT_SIZE, seed: int = 0) -> Path:
    """A directory holding ``VOC2007/`` of generated scenes.

    Without ``root``: ``$MOCO_DATA_HOME/scenes-v{EMBEDDED_VERSION}-seed{seed}-{size}px-{trainval}x{test}``.
    """
    return ensure("VOC2007", _write_voc, root, {"trainval": trainval, "test": test}, size, seed)


def ensure_coco(root: Path | None = None, *, train: int = DEFAULT_TRAIN, val: int = DEFAULT_TEST,
                size: int = DEFAULT_SIZE, seed: int = 0) -> Path:
    """A directory holding ``coco/`` of the same scenes; as :func:`ensure_voc` (same default root)."""
    return ensure("coco", _write_coco, root, {"train2017": train, "val2017": val}, size, seed)
