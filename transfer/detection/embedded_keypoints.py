"""Embedded keypoint data in COCO's keypoint layout: the scenes of :mod:`transfer.embedded` with keypointed objects.

``write_keypoints`` writes ``coco/annotations/person_keypoints_{train,val}2017.json`` and ``coco/{train,val}2017/``,
so that ``moco eval keypoints --data embedded`` reads them with the real reader. Every object of a scene is
annotated: the 8 shape classes are 8 categories that name the same K = 4 keypoints, each object's extreme points
(``top``, ``left``, ``bottom``, ``right``: the highest, leftmost, lowest and rightmost points of its outline, as
ExtremeNet annotates objects; where a side of the outline lies within 1 pixel of level, the mean of its vertices
there). A horizontal flip exchanges ``left`` and ``right``, as COCO's person keypoints. Objects are larger than in
the detection scenes (their larger side 25-60% of the image) so that the points lie more than a few pixels apart.

The classes are what makes the set hard for a backbone trained from scratch, as on COCO, where AP^kp is averaged
over categories: the detector must tell the 8 shapes apart before its keypoints count. Versions 1-2 keypointed
one class among unannotated distractors (v1: the star's 5 tips; v2: the pentagon's 5 corners). There the task was
finding one shape and its corners, which random init learns about as fast as a pretrained backbone: neither
version separated them over 3 trials, and at 3x the schedule random init came out ahead (docs/keypoints.md).

A point is visible (v = 2) when a pixel of the object's visible mask lies within 1 pixel of it, else labelled but
hidden (v = 1): an object partly covered by a later one keeps its hidden points, as COCO annotates occluded joints.
Coordinates are written as COCO's (the pixel grid of the polygon drawing); ``area`` is the visible mask's, as
COCO's is the segmentation's. Scenes are drawn from their own random stream.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from moco_core.data import shapes
from transfer.embedded import DEFAULT_SIZE, DEFAULT_TEST, DEFAULT_TRAIN, JPEG_QUALITY, ensure, scenes

KEYPOINTS_VERSION = 4  # bump whenever the files written here change (v1: star tips; v2, v3: pentagon corners)
KEYPOINT_NAMES = ("top", "left", "bottom", "right")
SKELETON = ((1, 2), (2, 3), (3, 4), (4, 1))  # 1-based, as COCO's
_LEVEL = 1.0  # px: outline vertices this close to a side's extreme share its point
_EXTENT = (0.25, 0.6)
_STREAM = 35  # apart from the detection scenes' stream


def _visibility(label: np.ndarray, index: int, x: float, y: float) -> int:
    """2 when object ``index`` of the label map shows within 1 px of (x, y), else 1."""
    size = label.shape[0]
    cx, cy = int(round(x)), int(round(y))
    window = label[max(cy - 1, 0):min(cy + 2, size), max(cx - 1, 0):min(cx + 2, size)]
    return 2 if (window == index).any() else 1


def extreme_points(outline: np.ndarray) -> np.ndarray:
    """The (4, 2) extreme points of a (k, 2) polygon in image coordinates (y down), in KEYPOINT_NAMES' order: per
    side, the mean of the vertices within ``_LEVEL`` px of the extreme (one vertex, or a level side's ends)."""
    points = []
    for axis, sign in ((1, 1.0), (0, 1.0), (1, -1.0), (0, -1.0)):  # top: least y; left: least x; bottom; right
        coord = sign * outline[:, axis]
        points.append(outline[coord <= coord.min() + _LEVEL].mean(axis=0))
    return np.stack(points)


def _annotation(obj: dict[str, Any], image_id: int, ann_id: int) -> dict[str, Any]:
    x0, y0, x1, y1 = obj["bbox"]
    keypoints: list[float] = []
    for x, y in extreme_points(obj["outline"]).tolist():
        keypoints += [round(x, 2), round(y, 2), _visibility(obj["label"], obj["index"], x, y)]
    return {"id": ann_id, "image_id": image_id, "category_id": obj["category_id"] + 1,
            "bbox": [x0, y0, x1 - x0, y1 - y0], "area": float(obj["mask"].sum()), "iscrowd": 0,
            "keypoints": keypoints, "num_keypoints": len(KEYPOINT_NAMES)}


def write_keypoints(target: Path, counts: dict[str, int], size: int, seed: int) -> None:
    """``target/coco/`` with ``counts["train2017"]`` and ``counts["val2017"]`` keypoint scenes."""
    coco = target / "coco"
    (coco / "annotations").mkdir(parents=True, exist_ok=True)
    categories = [{"id": k + 1, "name": name, "supercategory": "shape", "keypoints": list(KEYPOINT_NAMES),
                   "skeleton": [list(p) for p in SKELETON]} for k, name in enumerate(shapes.CLASSES)]
    for split, scene_split in (("train2017", "train"), ("val2017", "test")):
        (coco / split).mkdir()
        images, annotations = [], []
        for n, (image, objects) in enumerate(scenes(scene_split, counts[split], size=size, seed=seed,
                                                    stream=_STREAM, extent_range=_EXTENT), 1):
            file_name = f"{n:012d}.jpg"
            image.save(coco / split / file_name, format="JPEG", quality=JPEG_QUALITY)
            images.append({"id": n, "file_name": file_name, "width": size, "height": size})
            annotations += [_annotation(obj, n, len(annotations) + k + 1) for k, obj in enumerate(objects)]
        doc = {"info": {"description": f"moco embedded keypoint scenes v{KEYPOINTS_VERSION}"},
               "images": images, "annotations": annotations, "categories": categories}
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
