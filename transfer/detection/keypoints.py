"""COCO keypoints (``person_keypoints_*.json`` or any COCO-format keypoint file): the keypoint set, validated
annotations, the predictions' result dicts and AP^kp through pycocotools' ``COCOeval(..., "keypoints")``.

The file's categories name the keypoints (``keypoints``: K distinct names; ``skeleton``: optional 1-based pairs);
every category must name the same K (detectron2's keypoint head has one set of K outputs). An annotation has
``keypoints``: 3K numbers ``x, y, v`` (v 0: not labelled, 1: labelled but hidden, 2: visible; x and y are 0 where
v is 0), and ``num_keypoints``, the count of ``v > 0`` (computed where it is absent). COCO's x, y are integer pixel
indices; as detectron2's loader, 0.5 is added to put them at the pixel's centre in continuous coordinates, and
taken off again in the results.

Horizontal flip swaps left and right keypoints (detectron2's ``keypoint_flip_map``, torchvision's reference
``_flip_coco_person_keypoints``): a name's partner is the name with "left" and "right" exchanged (``left_eye`` and
``right_eye``; ``left`` and ``right``), where the set has it; other keypoints keep their index.

OKS sigmas: COCO's 17 for COCO's person keypoints (pycocotools' ``Params.setKpParams``);
``detector.keypoint_oks_sigmas`` where the config gives them (detectron2's ``TEST.KEYPOINT_OKS_SIGMAS``);
otherwise, for a keypoint set of one's own, every keypoint gets the mean of COCO's 17 (0.0669): a documented
choice, as no per-keypoint scale is known.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from moco_core.data.data import DatasetError, show_value
from transfer.detection.coco import AnnotationFields, check_image_files, parse_coco, read_json

logger = logging.getLogger("moco.transfer")

COCO_PERSON_KEYPOINTS: tuple[str, ...] = (
    "nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder", "left_elbow",
    "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee", "right_knee", "left_ankle",
    "right_ankle")
# pycocotools' cocoeval.Params.setKpParams, in the order above
COCO_PERSON_SIGMAS: tuple[float, ...] = tuple(v / 10.0 for v in (
    0.26, 0.25, 0.25, 0.35, 0.35, 0.79, 0.79, 0.72, 0.72, 0.62, 0.62, 1.07, 1.07, 0.87, 0.87, 0.89, 0.89))
DEFAULT_SIGMA = sum(COCO_PERSON_SIGMAS) / len(COCO_PERSON_SIGMAS)  # a keypoint set of one's own (module docstring)


@dataclass(frozen=True)
class KeypointSet:
    """The K keypoints of a dataset: names, skeleton (0-based pairs) and the index each takes on a flip."""

    names: tuple[str, ...]
    skeleton: tuple[tuple[int, int], ...] = ()

    @property
    def flip_indices(self) -> tuple[int, ...]:
        """``flipped[k] = original[flip_indices[k]]``: left and right exchanged."""
        index = {name: k for k, name in enumerate(self.names)}
        return tuple(index.get(_mirror(name), k) for k, name in enumerate(self.names))

    @property
    def flip_pairs(self) -> tuple[tuple[str, str], ...]:
        """The (left, right) name pairs a flip exchanges."""
        return tuple((self.names[k], self.names[j]) for k, j in enumerate(self.flip_indices) if k < j)


_SIDES = re.compile(r"left|right|Left|Right|LEFT|RIGHT")
_SWAP = {"left": "right", "right": "left", "Left": "Right", "Right": "Left", "LEFT": "RIGHT", "RIGHT": "LEFT"}


def _mirror(name: str) -> str:
    return _SIDES.sub(lambda m: _SWAP[m[0]], name)


def oks_sigmas(keypoints: KeypointSet, configured: Sequence[float] = ()) -> np.ndarray:
    """The (K,) OKS sigmas of ``keypoints`` (module docstring); DatasetError when ``configured`` is not K long."""
    k = len(keypoints.names)
    if configured:
        if len(configured) != k:
            raise DatasetError(f"detector.keypoint_oks_sigmas: {len(configured)} sigmas for a set of {k} keypoints")
        return np.asarray(configured, dtype=np.float64)
    if keypoints.names == COCO_PERSON_KEYPOINTS:
        return np.asarray(COCO_PERSON_SIGMAS)
    return np.full(k, DEFAULT_SIGMA)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def keypoint_set(doc: dict[str, Any], where: str) -> KeypointSet:
    """The categories' keypoint set (module docstring); a one-line DatasetError naming what is wrong."""
    found: KeypointSet | None = None
    for index, cat in enumerate(doc.get("categories") or []):
        if not isinstance(cat, dict):
            continue  # parse_coco names it
        names, skeleton = cat.get("keypoints"), cat.get("skeleton", [])
        here = f"{where}: categories[{index}] ({show_value(cat.get('name'), 20)})"
        if not (isinstance(names, list) and names and all(isinstance(n, str) and n for n in names)):
            raise DatasetError(f"{here}: 'keypoints' must be a non-empty list of keypoint names, got "
                               f"{show_value(names)} (is this an instances_*.json? keypoints are in "
                               f"person_keypoints_*.json)")
        if len(set(names)) != len(names):
            raise DatasetError(f"{here}: keypoint names repeat: {show_value(names)}")
        k = len(names)
        if not (isinstance(skeleton, list) and all(isinstance(p, list) and len(p) == 2 and all(
                isinstance(i, int) and not isinstance(i, bool) and 1 <= i <= k for i in p) for p in skeleton)):
            raise DatasetError(f"{here}: 'skeleton' must be pairs of 1-based keypoint indices in 1..{k}, got "
                               f"{show_value(skeleton)}")
        current = KeypointSet(tuple(names), tuple((a - 1, b - 1) for a, b in skeleton))
        if found is not None and current.names != found.names:
            raise DatasetError(f"{here}: its keypoints differ from the first category's; one keypoint head "
                               f"predicts one set of keypoints")
        found = found or current
    if found is None:
        raise DatasetError(f"{where}: no category names keypoints")
    return found


def annotation_fields(k: int) -> AnnotationFields:
    """The reader of an annotation's ``keypoints``, ``num_keypoints`` and ``area`` for a set of ``k`` keypoints."""

    def read(ann: dict[str, Any], img: dict[str, Any], here: str) -> dict[str, Any]:
        values = ann.get("keypoints")
        if not (isinstance(values, list) and len(values) == 3 * k and all(map(_is_number, values))):
            raise DatasetError(f"{here}: 'keypoints' must be {3 * k} finite numbers (x, y, v for each of the "
                               f"{k} keypoints), got {show_value(values)}")
        visibility = values[2::3]
        if any(v not in (0, 1, 2) for v in visibility):
            raise DatasetError(f"{here}: keypoint visibility must be 0, 1 or 2, got {show_value(visibility)}")
        labelled = sum(v > 0 for v in visibility)
        count = ann.get("num_keypoints", labelled)
        if count != labelled or isinstance(count, bool):
            raise DatasetError(f"{here}: num_keypoints is {show_value(count)} but {labelled} keypoints have v > 0")
        area = ann.get("area")
        fields = {"keypoints": [float(v) for v in values], "num_keypoints": labelled}
        if area is not None:
            if not _is_number(area) or area < 0:
                raise DatasetError(f"{here}: 'area' must be a number >= 0, got {show_value(area)}")
            fields["area"] = float(area)
        return fields

    return read


def load_keypoints(json_path: Path, image_root: Path, *, check_files: bool = True,
                   ) -> tuple[list[dict], list[str], dict[int, int], KeypointSet]:
    """:func:`transfer.detection.coco.load_coco` for a keypoint file, and its keypoint set: each annotation's
    record also holds ``keypoints`` (3K floats as in the file), ``num_keypoints`` and the file's ``area``."""
    json_path = Path(json_path)
    doc = read_json(json_path)
    if not isinstance(doc, dict):
        raise DatasetError(f"{json_path}: expected a JSON object, found {type(doc).__name__}")
    keypoints = keypoint_set(doc, str(json_path))
    dicts, class_names, mapping = parse_coco(doc, image_root, where=str(json_path),
                                             annotation_fields=annotation_fields(len(keypoints.names)))
    if check_files:
        check_image_files(dicts, json_path, image_root)
    return dicts, class_names, mapping, keypoints


def filter_few_keypoints(dicts: Sequence[dict[str, Any]], minimum: int) -> list[dict[str, Any]]:
    """The training images with at least ``minimum`` labelled keypoints in all (detectron2's
    ``filter_images_with_few_keypoints``, MIN_KEYPOINTS_PER_IMAGE)."""
    kept = [d for d in dicts if sum(a.get("num_keypoints", 0) for a in d["annotations"]
                                     if not a.get("iscrowd")) >= minimum]
    if len(kept) < len(dicts):
        logger.info("dropped %d of %d images with fewer than %d keypoints", len(dicts) - len(kept), len(dicts),
                    minimum)
    return kept


def keypoint_targets(annotations: Sequence[dict[str, Any]]) -> np.ndarray:
    """(n, K, 3) float32 ``x, y, v`` of the annotations, at pixel centres (COCO's indices + 0.5, as detectron2)."""
    values = np.asarray([a["keypoints"] for a in annotations], dtype=np.float32).reshape(len(annotations), -1, 3)
    values[..., :2] += 0.5
    return values


def flip_keypoints(keypoints: np.ndarray | Any, width: int, flip_indices: Sequence[int]) -> Any:
    """(n, K, 3) keypoints of an image ``width`` px wide, flipped horizontally: x -> width - x and each keypoint
    takes its mirror's place (left and right exchanged)."""
    flipped = keypoints[:, list(flip_indices)].clone() if hasattr(keypoints, "clone") else \
        keypoints[:, list(flip_indices)].copy()
    flipped[..., 0] = width - flipped[..., 0]
    return flipped


def keypoint_results(dicts: Sequence[dict[str, Any]], contiguous_to_original: dict[int, int],
                     ) -> Callable[[int, dict[str, Any]], list]:
    """A ``predict`` converter: COCO keypoint result dicts (XYWH box, ``keypoints`` x, y, score per keypoint in
    COCO's pixel indices, the 0.5 taken off as detectron2 does)."""

    def convert(index: int, output: dict[str, Any]) -> list:
        results = []
        for box, label, score, points, point_scores in zip(output["boxes"], output["labels"], output["scores"],
                                                            output["keypoints"], output["keypoints_scores"],
                                                            strict=True):
            x0, y0, x1, y1 = map(float, box)
            flat = [[float(x) - 0.5, float(y) - 0.5, float(s)] for (x, y, _), s in zip(points, point_scores,
                                                                                        strict=True)]
            results.append({"image_id": dicts[index]["image_id"],
                            "category_id": contiguous_to_original[int(label) - 1],
                            "bbox": [x0, y0, x1 - x0, y1 - y0], "score": float(score),
                            "keypoints": [v for point in flat for v in point]})
        return results

    return convert


def keypoint_gt(dicts: Sequence[dict[str, Any]], class_names: Sequence[str], contiguous_to_original: dict[int, int],
                keypoints: KeypointSet) -> Any:
    """An in-memory pycocotools ``COCO`` of the validated test dicts, keypoints as in the file; ``area`` is the
    file's (COCO: the mask's), else the box's. Annotation ids start at 1 (COCOeval takes 0 for "unmatched")."""
    from pycocotools.coco import COCO

    images, annotations = [], []
    for d in dicts:
        images.append({"id": d["image_id"], "height": int(d["height"]), "width": int(d["width"])})
        for ann in d["annotations"]:
            x0, y0, x1, y1 = ann["bbox"]
            annotations.append({
                "id": len(annotations) + 1, "image_id": d["image_id"], "iscrowd": int(ann.get("iscrowd", 0)),
                "category_id": contiguous_to_original[ann["category_id"]], "bbox": [x0, y0, x1 - x0, y1 - y0],
                "area": ann.get("area", (x1 - x0) * (y1 - y0)), "keypoints": list(ann["keypoints"]),
                "num_keypoints": ann["num_keypoints"]})
    skeleton = [[a + 1, b + 1] for a, b in keypoints.skeleton]
    categories = [{"id": contiguous_to_original[i], "name": name, "keypoints": list(keypoints.names),
                   "skeleton": skeleton} for i, name in enumerate(class_names)]
    coco = COCO()
    coco.dataset = {"images": images, "annotations": annotations, "categories": categories}
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco
