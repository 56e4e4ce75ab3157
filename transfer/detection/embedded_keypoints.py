"""Embedded keypoint data in COCO's keypoint layout: the scenes of :mod:`transfer.embedded` with a keypointed class.

``write_keypoints`` writes ``coco/annotations/person_keypoints_{train,val}2017.json`` and ``coco/{train,val}2017/``,
so that ``moco eval keypoints --data embedded`` reads them with the real reader. Half the objects of a scene are
pentagons and the rest the other shapes classes (distractors, unannotated, as COCO's non-person objects are in its
keypoint files); objects are larger than in the detection scenes (their larger side 25-60% of the image) so that
a pentagon's corners lie more than a few pixels apart. The one category, ``pentagon`` (id 1), has K = 5
keypoints, its 5 corners as drawn (shapes are upright within 15 degrees, so each corner keeps its identity):
``top``, ``left_upper``, ``left_lower``, ``right_lower``, ``right_upper``; a horizontal flip exchanges the left
and right ones, as COCO's person keypoints. The skeleton joins neighbouring corners.

The keypointed class is the pentagon, not the star of keypoint scenes v1: among its distractors are the hexagon
and the circle, so finding it takes the shape recognition a pretraining gives, where a star is told from
everything else by its spikes alone (on v1, random init matched both pretrained backbones, docs/keypoints.md).

A corner is visible (v = 2) when a pixel of the object's visible mask lies within 1 pixel of it, else labelled
but hidden (v = 1): an earlier pentagon partly covered by a later object keeps its hidden corners, as COCO annotates
occluded joints. Coordinates are written as COCO's (the pixel grid of the polygon drawing); ``area`` is the
visible mask's, as COCO's is the segmentation's. Scenes are drawn from their own random stream.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from moco_core.data import shapes
from transfer.embedded import DEFAULT_SIZE, DEFAULT_TEST, DEFAULT_TRAIN, JPEG_QUALITY, ensure, scenes

KEYPOINTS_VERSION = 2  # bump whenever the files written here change (v1: stars, their 5 outer tips)
KEYPOINT_NAMES = ("top", "left_upper", "left_lower", "right_lower", "right_upper")
SKELETON = ((1, 2), (2, 3), (3, 4), (4, 5), (5, 1))  # 1-based, as COCO's
_CLASS = shapes.CLASSES.index("pentagon")
_TIPS = (0, 1, 2, 3, 4)  # the pentagon's vertices, in KEYPOINT_NAMES' order (top, then anticlockwise as seen)
_EXTENT = (0.25, 0.6)
_STREAM = 35  # apart from the detection scenes' stream


def _visibility(label: np.ndarray, index: int, x: float, y: float) -> int:
    """2 when object ``index`` of the label map shows within 1 px of (x, y), else 1."""
    size = label.shape[0]
    cx, cy = int(round(x)), int(round(y))
    window = label[max(cy - 1, 0):min(cy + 2, size), max(cx - 1, 0):min(cx + 2, size)]
    return 2 if (window == index).any() else 1


def _annotation(obj: dict[str, Any], image_id: int, ann_id: int) -> dict[str, Any]:
    x0, y0, x1, y1 = obj["bbox"]
    keypoints: list[float] = []
    for vertex in _TIPS:
        x, y = (float(v) for v in obj["outline"][vertex])
        keypoints += [round(x, 2), round(y, 2), _visibility(obj["label"], obj["index"], x, y)]
    return {"id": ann_id, "image_id": image_id, "category_id": 1, "bbox": [x0, y0, x1 - x0, y1 - y0],
            "area": float(obj["mask"].sum()), "iscrowd": 0, "keypoints": keypoints, "num_keypoints": len(_TIPS)}


def write_keypoints(target: Path, counts: dict[str, int], size: int, seed: int) -> None:
    """``target/coco/`` with ``counts["train2017"]`` and ``counts["val2017"]`` keypoint scenes."""
    coco = target / "coco"
    (coco / "annotations").mkdir(parents=True, exist_ok=True)
    category = {"id": 1, "name": shapes.CLASSES[_CLASS], "supercategory": "shape", "keypoints": list(KEYPOINT_NAMES),
                "skeleton": [list(p) for p in SKELETON]}
    for split, scene_split in (("train2017", "train"), ("val2017", "test")):
        (coco / split).mkdir()
        images, annotations = [], []
        for n, (image, objects) in enumerate(scenes(scene_split, counts[split], size=size, seed=seed,
                                                    stream=_STREAM, focus=_CLASS, extent_range=_EXTENT), 1):
            file_name = f"{n:012d}.jpg"
            image.save(coco / split / file_name, format="JPEG", quality=JPEG_QUALITY)
            images.append({"id": n, "file_name": file_name, "width": size, "height": size})
            annotations += [_annotation(obj, n, len(annotations) + k + 1)
                            for k, obj in enumerate(o for o in objects if o["category_id"] == _CLASS)]
        doc = {"info": {"description": f"moco embedded keypoint scenes v{KEYPOINTS_VERSION}"},
               "images": images, "annotations": annotations, "categories": [category]}
        with open(coco / "annotations" / f"person_keypoints_{split}.json", "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))


def ensure_keypoints(root: Path | None = None, *, train: int = DEFAULT_TRAIN, val: int = DEFAULT_TEST,
                     size: int = DEFAULT_SIZE, seed: int = 0) -> Path:
    """A directory holding ``coco/`` with the keypoint scenes in COCO's keypoint layout
    (:mod:`transfer.detection.embedded_keypoints`); without ``root``:
    ``$MOCO_DATA_HOME/keypoints-v{KEYPOINTS_VERSION}-seed{seed}-{size}px-{train}x{val}``."""
    if root is None:
        root = shapes.data_home() / f"keypoints-v{KEYPOINTS_VERSION}-seed{seed}-{size}px-{train}x{val}"
    return ensure("coco", write_keypoints, root, {"train2017": train, "val2017": val}, size, seed,
               version=f"keypoints v{KEYPOINTS_VERSION}")
