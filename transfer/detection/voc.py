"""PASCAL VOC (a ``VOC2007/`` or ``VOC2012/`` year directory) read into detectron2-style dataset dicts.

Coordinates. VOC XML boxes are 1-based and inclusive: a box covering pixel columns 0..9 (0-based) is written
``xmin=1, xmax=10``. Like detectron2's VOC loader we subtract 1 from ``xmin`` and ``ymin`` only, which gives
continuous 0-based coordinates ``[xmin - 1, xmax]`` = [0, 10] whose width is the pixel count. The evaluator
(:func:`transfer.detection.metrics.voc_evaluate`) adds the 1 back before using the devkit's ``+1`` area formula, so both
together compute exactly the VOC devkit's overlaps.

Policy for boxes that do not fit the image (``[0, width] x [0, height]`` in these coordinates): a box that
sticks out is clipped to the image (VOC has a few boxes with ``xmin = 0`` or ``xmax = width + 1``); a box with
no area inside the image, a degenerate box (``xmax < xmin``, i.e. ``x1 <= x0`` after the shift), a non-numeric
or non-finite coordinate is an error. Every error is a one-line :class:`DatasetError` naming the file.

``difficult`` objects are kept with ``difficult=True``; the evaluator ignores them as the VOC devkit does.
"""

from __future__ import annotations

import logging
import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from moco_core.data.data import DatasetError, show_value
from moco_core.user_files import LINES_LIMIT, LIST_LIMIT, all_within, inside, read_bytes, read_text

VOC_CLASSES: tuple[str, ...] = (
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor",
)
_SUBDIRS = ("Annotations", "JPEGImages", os.path.join("ImageSets", "Main"))

logger = logging.getLogger("moco.transfer")


def read_split(root: Path, split: str) -> list[str]:
    """The image ids listed in ``root/ImageSets/Main/{split}.txt``, one per line (blank lines skipped)."""
    path = Path(root) / "ImageSets" / "Main" / f"{split}.txt"
    lines = read_text(path, limit=LIST_LIMIT, what="split file", error=DatasetError, lines=LINES_LIMIT).splitlines()
    ids = []
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if len(fields) > 1:
            raise DatasetError(f"{path}:{number}: expected one image id per line, found {show_value(line)}")
        if fields:  # the rule of every name read from a file: nothing absolute, nothing that climbs out
            inside(root, fields[0], what=f"{path}:{number}: image id", error=DatasetError)
        # and an id names a file of Annotations/ and JPEGImages/: no folder part either
        if fields and (fields[0] in (".", "..") or "/" in fields[0] or "\\" in fields[0]):
            raise DatasetError(f"{path}:{number}: {show_value(fields[0])} is not an image id (ids name files in "
                               f"Annotations/ and JPEGImages/, never a path)")
        ids += fields
    return ids


def check_voc_layout(root: Path, splits: Iterable[str]) -> None:
    """Raise one :class:`DatasetError` listing what is missing for ``splits``, or return if nothing is.

    Checks the directories, each split file, that it lists images, and how many listed images lack their
    ``Annotations/<id>.xml`` or ``JPEGImages/<id>.jpg`` (naming the first).
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"VOC directory not found: {root} (expected a year directory such as VOC2007/ under "
                           f"--data)")
    missing_dirs = [d for d in _SUBDIRS if not (root / d).is_dir()]
    if missing_dirs:
        raise DatasetError(f"{root} is not a VOC year directory: missing {', '.join(d + '/' for d in missing_dirs)}")
    xmls = set(os.listdir(root / "Annotations"))
    jpegs = set(os.listdir(root / "JPEGImages"))
    problems = []
    for split in splits:
        if not (root / "ImageSets" / "Main" / f"{split}.txt").is_file():
            problems.append(f"split file ImageSets/Main/{split}.txt is missing")
            continue
        ids = read_split(root, split)
        if not ids:
            problems.append(f"split {split} lists no image")
        for sub, present, ext in (("Annotations", xmls, ".xml"), ("JPEGImages", jpegs, ".jpg")):
            absent = [i for i in ids if i + ext not in present]
            if absent:
                problems.append(f"{len(absent)} of {len(ids)} images of split {split} have no {sub}/<id>{ext} "
                                f"(first: {sub}/{absent[0]}{ext})")
    if problems:
        raise DatasetError(f"{root}: " + "; ".join(problems))


def _child_text(node: ET.Element, tag: str, where: str) -> str:
    child = node.find(tag)
    if child is None or child.text is None or not child.text.strip():
        raise DatasetError(f"{where}: missing <{tag}>")
    return child.text.strip()


def _number(node: ET.Element, tag: str, where: str) -> float:
    text = _child_text(node, tag, where)
    try:
        value = float(text)
    except ValueError:
        raise DatasetError(f"{where}: <{tag}> is not a number: {show_value(text)}") from None
    if not math.isfinite(value):
        raise DatasetError(f"{where}: <{tag}> is not finite: {show_value(text)}")
    return value


def _size(root: ET.Element, where: str) -> tuple[int, int]:
    size = root.find("size")
    if size is None:
        raise DatasetError(f"{where}: missing <size>")
    width, height = _number(size, "width", where + " <size>"), _number(size, "height", where + " <size>")
    if width < 1 or height < 1 or width != int(width) or height != int(height):
        raise DatasetError(f"{where}: <size> must be positive integers, got width={width:g} height={height:g}")
    return int(width), int(height)


def _object(obj: ET.Element, index: int, width: int, height: int, class_ids: dict[str, int],
            where: str) -> tuple[dict[str, Any], bool]:
    """One ``<object>`` as an annotation dict, and whether its box had to be clipped."""
    name = _child_text(obj, "name", f"{where} object {index}")
    here = f"{where} object {index} ({show_value(name, 30)})"
    if name not in class_ids:
        raise DatasetError(f"{here}: unknown class name; expected one of {len(class_ids)} classes "
                           f"({', '.join(list(class_ids)[:4])}, ...)")
    difficult_text = (obj.findtext("difficult") or "0").strip() or "0"
    if difficult_text not in ("0", "1"):
        raise DatasetError(f"{here}: <difficult> must be 0 or 1, got {show_value(difficult_text)}")
    box = obj.find("bndbox")
    if box is None:
        raise DatasetError(f"{here}: missing <bndbox>")
    xmin, ymin, xmax, ymax = (_number(box, tag, here + " <bndbox>") for tag in ("xmin", "ymin", "xmax", "ymax"))
    x0, y0, x1, y1 = xmin - 1.0, ymin - 1.0, xmax, ymax  # 1-based inclusive -> 0-based continuous
    if x1 <= x0 or y1 <= y0:
        raise DatasetError(f"{here}: degenerate box xmin={xmin:g} ymin={ymin:g} xmax={xmax:g} ymax={ymax:g}")
    cx0, cy0, cx1, cy1 = max(x0, 0.0), max(y0, 0.0), min(x1, float(width)), min(y1, float(height))
    if cx1 <= cx0 or cy1 <= cy0:
        raise DatasetError(f"{here}: box xmin={xmin:g} ymin={ymin:g} xmax={xmax:g} ymax={ymax:g} lies outside "
                           f"the {width}x{height} image")
    annotation = {"bbox": [cx0, cy0, cx1, cy1], "category_id": class_ids[name], "iscrowd": 0,
                  "difficult": difficult_text == "1"}
    return annotation, (cx0, cy0, cx1, cy1) != (x0, y0, x1, y1)


def _parse(path: Path) -> ET.Element:
    """The ``<annotation>`` element of a VOC XML file; DatasetError for anything else."""
    where = str(path)
    data = read_bytes(path, limit=LIST_LIMIT, what="annotation file", error=DatasetError)
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:  # no DTDs: nothing to expand, no entity bombs
        raise DatasetError(f"{where}: XML with a DTD or entity declarations is not accepted")
    try:
        root = ET.fromstring(data)
    except (ET.ParseError, ValueError, LookupError) as err:  # ValueError, LookupError: odd encodings
        raise DatasetError(f"{where}: unparseable XML ({' '.join(str(err).split())[:120]})") from None
    if root.tag != "annotation":
        raise DatasetError(f"{where}: root element is {show_value(root.tag, 30)}, expected 'annotation'")
    return root


def read_voc_xml(path: Path, class_names: Sequence[str] = VOC_CLASSES) -> tuple[int, int, list[dict[str, Any]], int]:
    """(width, height, annotation dicts, number of clipped boxes) of one VOC annotation file."""
    where = str(path)
    root = _parse(path)
    width, height = _size(root, where)
    class_ids = {name: i for i, name in enumerate(class_names)}
    annotations, clipped = [], 0
    for index, obj in enumerate(root.findall("object")):
        annotation, was_clipped = _object(obj, index, width, height, class_ids, where)
        annotations.append(annotation)
        clipped += was_clipped
    return width, height, annotations, clipped


def class_names_in(sets: Iterable[tuple[Path, str]]) -> list[str]:
    """Every object class name the XML files of ``sets`` ((devkit directory, split) pairs) use, sorted: the
    label order of a custom devkit given without ``data.classes``."""
    names: set[str] = set()
    for root, split in sets:
        for image_id in read_split(root, split):
            path = Path(root) / "Annotations" / f"{image_id}.xml"
            objects = _parse(path).findall("object")
            names.update(_child_text(obj, "name", f"{path} object {i}") for i, obj in enumerate(objects))
    if not names:
        raise DatasetError(f"no object in the annotations of {', '.join(f'{r.name}/{s}' for r, s in sets)}")
    logger.info("classes read from the annotations (data.classes sets them and their order): %s",
                ", ".join(sorted(names)))
    return sorted(names)


def load_voc(root: Path, split: str, class_names: Sequence[str] = VOC_CLASSES) -> list[dict[str, Any]]:
    """Dataset dicts of ``root/ImageSets/Main/{split}.txt``, in the split file's order.

    Each is ``{"file_name": absolute JPEG path, "image_id": the VOC id (str), "height", "width",
    "annotations": [{"bbox": [x0, y0, x1, y1], "category_id", "iscrowd": 0, "difficult": bool}]}``,
    ``category_id`` being the index in ``class_names``. The layout is checked first (:func:`check_voc_layout`),
    and that no file is a link out of ``root`` (:func:`moco_core.user_files.all_within`).
    """
    root = Path(root).absolute()
    check_voc_layout(root, [split])
    ids = read_split(root, split)
    all_within(root, [root / "ImageSets" / "Main" / f"{split}.txt",
                      *(root / sub / f"{i}{ext}" for sub, ext in (("Annotations", ".xml"), ("JPEGImages", ".jpg"))
                        for i in ids)], what="VOC file", error=DatasetError)
    dicts, clipped = [], 0
    for image_id in ids:
        width, height, annotations, n_clipped = read_voc_xml(root / "Annotations" / f"{image_id}.xml", class_names)
        clipped += n_clipped
        dicts.append({"file_name": str(root / "JPEGImages" / f"{image_id}.jpg"), "image_id": image_id,
                      "height": height, "width": width, "annotations": annotations})
    if clipped:
        logger.info("%s %s: %d boxes clipped to their image", root, split, clipped)
    return dicts
