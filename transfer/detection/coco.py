"""COCO instance annotations (``instances_*.json``) read into detectron2-style dataset dicts.

The JSON is validated here, not by pycocotools (whose loader asserts or fails with a KeyError deep inside), so
every problem is a one-line :class:`DatasetError` naming the file and the offending entry. As in detectron2's
COCO loader: category ids, sorted, become contiguous ids 0..C-1; images are ordered by id; a polygon with fewer
than 3 points (or an odd number of coordinates) is dropped, and an annotation left with no polygon is dropped
(counted in the log); an empty ``segmentation`` list means no mask. Uncompressed RLE is compressed (here, in
plain Python: reading COCO does not need pycocotools).

Boxes: COCO's ``[x, y, w, h]`` become ``[x0, y0, x1, y1]`` (pixel edges, no +1), with the VOC loader's policy
(:mod:`transfer.detection.voc`): ``w`` or ``h`` <= 0 or a non-finite value is an error, a box sticking out of the image
is clipped to it, a box with no area inside the image is an error.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from moco_core import user_files
from moco_core.data.data import DatasetError, show_value

logger = logging.getLogger("moco.transfer")

_MAX_RLE_CHARS = 1 << 24  # a compressed RLE longer than this is not a mask of any plausible image


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond float range
        return False


def _entries(doc: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    value = doc.get(key)
    if not isinstance(value, list):
        found = "missing" if key not in doc else f"a {type(value).__name__}"
        raise DatasetError(f"{where}: {key!r} must be a list, found {found}")
    for index, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise DatasetError(f"{where}: {key}[{index}] is a {type(entry).__name__}, expected an object")
    return value


def _categories(doc: dict[str, Any], where: str) -> tuple[list[str], dict[int, int]]:
    """Class names in contiguous order and original id -> contiguous id."""
    names: dict[int, str] = {}
    for index, cat in enumerate(_entries(doc, "categories", where)):
        cid, name = cat.get("id"), cat.get("name")
        if not _is_int(cid) or not isinstance(name, str) or not name:
            raise DatasetError(f"{where}: categories[{index}] needs an integer 'id' and a non-empty 'name', "
                               f"got id={show_value(cid)} name={show_value(name)}")
        if cid in names:
            raise DatasetError(f"{where}: category id {cid} appears twice")
        names[cid] = name
    if not names:
        raise DatasetError(f"{where}: 'categories' is empty")
    ordered = sorted(names)
    return [names[c] for c in ordered], {c: i for i, c in enumerate(ordered)}


def _images(doc: dict[str, Any], image_root: Path, where: str) -> dict[int, dict[str, Any]]:
    images: dict[int, dict[str, Any]] = {}
    for index, img in enumerate(_entries(doc, "images", where)):
        iid, name, width, height = img.get("id"), img.get("file_name"), img.get("width"), img.get("height")
        if not _is_int(iid) or not isinstance(name, str) or not name:
            raise DatasetError(f"{where}: images[{index}] needs an integer 'id' and a non-empty 'file_name', "
                               f"got id={show_value(iid)} file_name={show_value(name)}")
        if not (_is_int(width) and _is_int(height) and width > 0 and height > 0):
            raise DatasetError(f"{where}: image {iid}: width and height must be positive integers, got "
                               f"{show_value(width)} x {show_value(height)}")
        if iid in images:
            raise DatasetError(f"{where}: image id {iid} appears twice")
        path = user_files.inside(image_root, name, what=f"{where}: image {iid}: file_name", error=DatasetError)
        images[iid] = {"file_name": str(path), "image_id": iid, "height": height, "width": width, "annotations": []}
    return images


def _box(ann: dict[str, Any], img: dict[str, Any], here: str) -> list[float]:
    bbox = ann.get("bbox")
    if not (isinstance(bbox, list) and len(bbox) == 4 and all(_is_number(v) for v in bbox)):
        raise DatasetError(f"{here}: 'bbox' must be 4 finite numbers [x, y, w, h], got {show_value(bbox)}")
    x, y, w, h = (float(v) for v in bbox)
    if w <= 0 or h <= 0:
        raise DatasetError(f"{here}: degenerate bbox {show_value(bbox)} (w and h must be > 0)")
    x0, y0 = max(x, 0.0), max(y, 0.0)
    x1, y1 = min(x + w, float(img["width"])), min(y + h, float(img["height"]))
    if x1 <= x0 or y1 <= y0 or not all(map(math.isfinite, (x + w, y + h))):
        raise DatasetError(f"{here}: bbox {show_value(bbox)} lies outside the {img['width']}x{img['height']} image")
    return [x0, y0, x1, y1]


def decode_rle_string(counts: str) -> list[int]:
    """The run lengths of COCO's compressed RLE string (6 bits a character, deltas from the run two back)."""
    runs: list[int] = []
    pos = 0
    while pos < len(counts):
        value, shift, more = 0, 0, True
        while more:
            if pos >= len(counts):
                raise ValueError("truncated")
            c = ord(counts[pos]) - 48
            if not 0 <= c < 64:
                raise ValueError(f"character {counts[pos]!r} out of range")
            value |= (c & 0x1F) << (5 * shift)
            more = bool(c & 0x20)
            pos += 1
            shift += 1
            if not more and c & 0x10:
                value |= -1 << (5 * shift)
        if len(runs) > 2:
            value += runs[-2]
        runs.append(value)
    return runs


def encode_rle_string(runs: list[int]) -> str:
    """Inverse of :func:`decode_rle_string`: run lengths as COCO's compressed RLE string."""
    chars = []
    for index, run in enumerate(runs):
        value = run - runs[index - 2] if index > 2 else run
        more = True
        while more:
            c = value & 0x1F
            value >>= 5  # arithmetic shift: a negative delta ends at -1
            more = value != -1 if c & 0x10 else value != 0
            chars.append(chr(48 + (c | 0x20 if more else c)))
    return "".join(chars)


def _rle(segm: dict[str, Any], img: dict[str, Any], here: str) -> dict[str, Any]:
    """A validated RLE dict, compressed (``counts`` a str): run lengths add up, so pycocotools can decode it."""
    size, counts = segm.get("size"), segm.get("counts")
    if size != [img["height"], img["width"]]:
        raise DatasetError(f"{here}: RLE 'size' {show_value(size)} is not the image's [height, width] "
                           f"[{img['height']}, {img['width']}]")
    if img["height"] * img["width"] >= 1 << 32:  # pycocotools keeps sizes and run lengths in 32 bits
        raise DatasetError(f"{here}: an RLE mask of {img['height']}x{img['width']} pixels is too large")
    if isinstance(counts, str) and len(counts) <= _MAX_RLE_CHARS:
        try:
            runs = decode_rle_string(counts)
        except ValueError as err:
            raise DatasetError(f"{here}: malformed compressed RLE ({err})") from None
    elif isinstance(counts, list) and all(_is_int(c) for c in counts):
        runs = counts
    else:
        raise DatasetError(f"{here}: RLE 'counts' must be a string or a list of integers, got {show_value(counts)}")
    if any(r < 0 for r in runs) or sum(runs) != img["height"] * img["width"]:
        raise DatasetError(f"{here}: RLE run lengths must be >= 0 and add up to height*width")
    return {"size": list(size), "counts": counts if isinstance(counts, str) else encode_rle_string(runs)}


def _segmentation(ann: dict[str, Any], img: dict[str, Any], here: str) -> list[list[float]] | dict | None:
    """Valid polygons, an RLE dict, or None for no mask; ``[]`` when every polygon was invalid."""
    segm = ann.get("segmentation")
    if segm is None or segm == []:
        return None
    if isinstance(segm, dict):
        return _rle(segm, img, here)
    if not isinstance(segm, list) or not all(isinstance(p, list) and all(map(_is_number, p)) for p in segm):
        raise DatasetError(f"{here}: 'segmentation' must be a list of polygons (lists of numbers) or an RLE "
                           f"object, got {show_value(segm)}")
    return [[float(v) for v in p] for p in segm if len(p) % 2 == 0 and len(p) >= 6]


# Reads an annotation's task-specific fields (keypoints): (annotation, its image's dict, where) -> record fields.
AnnotationFields = Callable[[dict[str, Any], dict[str, Any], str], dict[str, Any]]


def parse_coco(doc: Any, image_root: Path, *, where: str = "<json>", annotation_fields: AnnotationFields | None = None,
               ) -> tuple[list[dict], list[str], dict[int, int]]:
    """:func:`load_coco` on an already-parsed JSON document (``where`` names it in errors); ``annotation_fields``
    adds fields of its own to each annotation's record (it raises DatasetError on a bad annotation)."""
    if not isinstance(doc, dict):
        raise DatasetError(f"{where}: expected a JSON object, found {type(doc).__name__}")
    class_names, to_contiguous = _categories(doc, where)
    images = _images(doc, Path(image_root).absolute(), where)
    dropped = 0
    for index, ann in enumerate(_entries(doc, "annotations", where)):
        here = f"{where} annotations[{index}] (id {show_value(ann.get('id'), 20)})"
        iid, cid, crowd = ann.get("image_id"), ann.get("category_id"), ann.get("iscrowd", 0)
        if not _is_int(iid) or iid not in images:
            raise DatasetError(f"{here}: image_id {show_value(iid)} is not in 'images'")
        if not _is_int(cid) or cid not in to_contiguous:
            raise DatasetError(f"{here}: category_id {show_value(cid)} is not in 'categories'")
        if crowd not in (0, 1) or isinstance(crowd, float):
            raise DatasetError(f"{here}: iscrowd must be 0 or 1, got {show_value(crowd)}")
        img = images[iid]
        record = {"bbox": _box(ann, img, here), "category_id": to_contiguous[cid], "iscrowd": int(crowd),
                  "difficult": False}
        segm = _segmentation(ann, img, here)
        if segm == []:  # had polygons, none valid: detectron2 drops such an instance
            dropped += 1
            continue
        if segm is not None:
            record["segmentation"] = segm
        if annotation_fields is not None:
            record.update(annotation_fields(ann, img, here))
        img["annotations"].append(record)
    if dropped:
        logger.warning("%s: %d annotations dropped: no valid polygon (3+ points) in their segmentation",
                       where, dropped)
    contiguous_to_original = {i: c for c, i in to_contiguous.items()}
    user_files.all_within(image_root, (img["file_name"] for img in images.values()), what=f"{where}: image",
                          error=DatasetError)  # a folder of image_root linked elsewhere is not read
    return [images[i] for i in sorted(images)], class_names, contiguous_to_original


def read_json(json_path: Path) -> Any:
    """The parsed JSON of an annotation file (:func:`moco_core.user_files.read_json`: a regular file of at most
    ANNOTATION_LIMIT bytes, numbers within 64 bits); a one-line DatasetError when it is missing or malformed."""
    return user_files.read_json(json_path, limit=user_files.ANNOTATION_LIMIT, what="COCO annotation file",
                                error=DatasetError)


def load_coco(json_path: Path, image_root: Path, *, check_files: bool = True,
              ) -> tuple[list[dict], list[str], dict[int, int]]:
    """(dataset dicts, class names in contiguous order, contiguous id -> original COCO category id).

    Dicts are ``{"file_name": image_root/file_name (absolute), "image_id": int, "height", "width",
    "annotations": [{"bbox": [x0, y0, x1, y1], "category_id": contiguous, "iscrowd", "difficult": False,
    "segmentation": polygons or RLE (if any)}]}``, images without annotations included (see
    :func:`filter_empty`). With ``check_files``, a missing image directory or image files are an error.
    """
    json_path = Path(json_path)
    dicts, class_names, mapping = parse_coco(read_json(json_path), image_root, where=str(json_path))
    if check_files:
        check_image_files(dicts, json_path, image_root)
    return dicts, class_names, mapping


def check_image_files(dicts: Sequence[dict[str, Any]], json_path: Path, image_root: Path) -> None:
    """DatasetError when the image directory or any image of ``dicts`` is missing."""
    if not Path(image_root).is_dir():
        raise DatasetError(f"COCO image directory not found: {image_root}")
    absent = [d["file_name"] for d in dicts if not os.path.isfile(d["file_name"])]
    if absent:
        raise DatasetError(f"{len(absent)} of {len(dicts)} images of {json_path.name} are missing "
                           f"(first: {absent[0]})")


def _has_object(d: dict[str, Any]) -> bool:
    return any(ann.get("iscrowd", 0) == 0 for ann in d["annotations"])


def filter_empty(dicts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The images with at least one non-crowd annotation (for training; evaluation keeps every image)."""
    kept = [d for d in dicts if _has_object(d)]
    if len(kept) < len(dicts):
        logger.info("dropped %d of %d images without a non-crowd annotation", len(dicts) - len(kept), len(dicts))
    return kept


def require_annotations(dicts: Sequence[dict[str, Any]], what: str) -> None:
    """Raise a one-line DatasetError unless some image of ``dicts`` has a non-crowd annotation."""
    if not any(_has_object(d) for d in dicts):
        raise DatasetError(f"{what}: no annotated object in {len(dicts)} images; there is nothing to train on")
