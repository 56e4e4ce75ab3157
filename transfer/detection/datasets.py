"""The datasets of ``moco eval voc|coco|keypoints|lvis|cityscapes``: names to files, files to dataset dicts, checked.

A dataset in ``data.train`` / ``data.test`` is one of:

* detectron2's name of a standard set, under the ``data.path`` root in detectron2's layout:
  ``voc_<year>_<split>`` is ``VOC<year>/ImageSets/Main/<split>.txt``; ``coco_<year>_<split>`` is
  ``coco/annotations/instances_<split><year>.json`` with its images in ``coco/<split><year>/``;
  ``keypoints_coco_<year>_<split>`` is ``coco/annotations/person_keypoints_<split><year>.json``, the same images;
  ``densepose_coco_<year>_<split>`` is DensePose's ``coco/annotations/densepose_<split><year>.json`` with its images
  in ``coco/train<year>/`` (split train) or ``coco/val<year>/`` (minival, valminusminival);
* a VOC-style devkit of one's own (``moco eval voc``): the path of its split file,
  ``DEVKIT/ImageSets/Main/<split>.txt`` (with ``DEVKIT/Annotations/<id>.xml`` and ``DEVKIT/JPEGImages/<id>.jpg``);
  the class names are ``data.classes`` or, when that is empty, every name the XML files of the configured sets
  use, sorted;
* a COCO-format annotation file of one's own (``moco eval coco``; a keypoint file for ``moco eval keypoints``):
  ``ANNOTATIONS.json:IMAGE_DIR``, the images' ``file_name`` being relative to ``IMAGE_DIR``;
* LVIS (``moco eval lvis``) and Cityscapes (``moco eval cityscapes``): the names and forms of
  :mod:`transfer.detection.lvis` and :mod:`transfer.detection.cityscapes`.

Relative paths are under ``data.path``. Every image a dataset names must lie inside its own folder (the devkit,
the image directory): a ``file_name`` of ``../../elsewhere.jpg`` is an error, not a read outside the dataset.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from PIL import Image

from moco_core import smoke
from moco_core.config import ConfigError
from moco_core.data.data import DatasetError, show_value
from transfer.detection.dataset_specs import (
    DatasetSpec,
    DetectionData,
    annotations_within,
    found_elsewhere,
    readable_name,
    trainable,
)

_STANDARD = re.compile(r"(voc|coco|keypoints_coco|densepose_coco)_(\d+)_(\w+)")
_STANDARD_TASKS = {"voc": "voc", "coco": "coco", "keypoints_coco": "keypoints", "densepose_coco": "densepose"}
_COCO_CUSTOM = re.compile(r"(.+\.json):(.+)")


def parse_dataset(name: str, task: str) -> DatasetSpec:
    """``name``'s files, relative to the datasets root (see the module docstring); ConfigError if it is none of
    the accepted forms. Reads nothing."""
    standard = _STANDARD.fullmatch(name)
    if task in ("lvis", "cityscapes") and not standard:
        from transfer.detection import cityscapes, lvis

        return (lvis if task == "lvis" else cityscapes).parse_name(name)
    if standard:
        if _STANDARD_TASKS[standard[1]] != task:
            raise ConfigError(f"data: {name!r} is a {_STANDARD_TASKS[standard[1]]} dataset, not a {task} one")
        year, split = standard[2], standard[3]
        if task == "voc":
            return DatasetSpec(name, Path(f"VOC{year}"), split, year=year)
        if task == "densepose":  # DensePose's names and files: minival and valminusminival are val images
            base, _, suffix = split.partition("_")
            images = "train" if base == "train" else "val"
            stem = f"densepose_{base}{year}" + (f"_{suffix}" if suffix else "")
            return DatasetSpec(name, Path("coco", f"{images}{year}"), stem[len("densepose_"):],
                               Path("coco", "annotations", f"{stem}.json"), year)
        kind = "person_keypoints" if task == "keypoints" else "instances"
        return DatasetSpec(name, Path("coco", f"{split}{year}"), f"{split}{year}",
                           Path("coco", "annotations", f"{kind}_{split}{year}.json"), year)
    if task == "voc":
        path = Path(name)
        if path.suffix == ".txt" and path.parent.parts[-2:] == ("ImageSets", "Main") and path.stem:
            return DatasetSpec(name, path.parent.parent.parent, path.stem)
        raise ConfigError(f"data: dataset {show_value(name)} is neither voc_<year>_<split> (e.g. voc_2007_trainval) "
                          f"nor a VOC-style split file DEVKIT/ImageSets/Main/<split>.txt")
    custom = _COCO_CUSTOM.fullmatch(name)
    if custom:
        return DatasetSpec(name, Path(custom[2]), Path(custom[1]).stem, Path(custom[1]))
    hint = " (name its image folder after a colon)" if name.endswith(".json") else ""
    standard_form = {"keypoints": "keypoints_coco_<year>_<split> (e.g. keypoints_coco_2017_train)",
                     "densepose": "densepose_coco_<year>_<split> (e.g. densepose_coco_2014_train)"}.get(
        task, "coco_<year>_<split> (e.g. coco_2017_train)")
    raise ConfigError(f"data: dataset {show_value(name)} is neither {standard_form} nor "
                      f"ANNOTATIONS.json:IMAGE_DIR, a COCO-format file and its images{hint}")


def require_a_batch(cfg: Any, data: DetectionData, batch: int) -> None:
    """DatasetError unless the training sets hold at least one batch of images with objects."""
    if len(data.train) < batch:
        raise DatasetError(f"{'+'.join(cfg.data.train)}: {len(data.train)} training images with objects, fewer "
                           f"than a batch of {batch}")


def dataset_root(cfg: Any) -> Path:
    """The datasets root of ``cfg`` (a TransferConfig): ``data.path``, the embedded sets generated on first use."""
    if cfg.data.path == "embedded":
        from transfer.detection.embedded_keypoints import ensure_keypoints
        from transfer.embedded import ensure_coco, ensure_voc

        scenes = smoke.SCENES.get(cfg.task, {}) if smoke.enabled() else {}  # MOCO_SMOKE=1: a small set of its own
        if cfg.task == "lvis":
            from transfer.detection.lvis import ensure_lvis

            return ensure_lvis(**scenes)
        if cfg.task == "cityscapes":
            from transfer.detection.cityscapes import ensure_cityscapes

            return ensure_cityscapes(**scenes)
        if cfg.task == "densepose":
            from transfer.detection.embedded_densepose import ensure_densepose

            return ensure_densepose(**scenes)
        return {"voc": ensure_voc, "coco": ensure_coco, "keypoints": ensure_keypoints}[cfg.task](**scenes)
    return Path(os.path.expanduser(str(cfg.data.path))).absolute()


def load_data(cfg: Any) -> DetectionData:
    """Read the configured datasets of ``cfg`` (a TransferConfig); DatasetError names what is missing. Training
    images without a usable object are left out (detectron2 filters empty images)."""
    root = dataset_root(cfg)
    specs = [parse_dataset(n, cfg.task) for n in (*cfg.data.train, cfg.data.test)]
    if cfg.task == "lvis":
        from transfer.detection.lvis import load_lvis_data

        data = load_lvis_data(cfg, root, specs)
    elif cfg.task == "cityscapes":
        from transfer.detection.cityscapes import load_cityscapes_data

        data = load_cityscapes_data(cfg, root, specs)
    else:
        data = _load_voc(cfg, root, specs) if cfg.task == "voc" else _load_coco(cfg, root, specs)
    check_image_sizes([*data.train, *data.test], workers=max(cfg.data.workers, 1))
    return data


def _load_voc(cfg: Any, root: Path, specs: list[DatasetSpec]) -> DetectionData:
    from transfer.detection.voc import VOC_CLASSES, check_voc_layout, class_names_in, load_voc

    folders = [(root / s.folder).absolute() for s in specs]
    for folder, spec in zip(folders, specs, strict=True):
        try:
            check_voc_layout(folder, [spec.split])
        except DatasetError as err:
            if folder.is_dir():  # there, but not whole: nothing to point to elsewhere
                raise
            raise DatasetError(f"{spec.name}: {err}{found_elsewhere(root, spec)}") from None
    if cfg.data.classes:
        class_names = list(cfg.data.classes)
    elif cfg.data.path == "embedded":
        from moco_core.data.shapes import CLASSES

        class_names = list(CLASSES)
    elif all(s.year for s in specs):
        class_names = list(VOC_CLASSES)
    else:
        class_names = class_names_in([(f, s.split) for f, s in zip(folders, specs, strict=True)])
    sets = [load_voc(f, s.split, class_names) for f, s in zip(folders, specs, strict=True)]
    train = [d for dicts in sets[:-1] for d in dicts if trainable(d)]
    name = readable_name(cfg, specs, "VOC" + "+".join(str(s.year)[2:] for s in specs[:-1]))
    return DetectionData(root, name, train, sets[-1], class_names, {i: i for i in range(len(class_names))}, None)


def _load_coco(cfg: Any, root: Path, specs: list[DatasetSpec]) -> DetectionData:
    from transfer.detection.coco import filter_empty, load_coco, require_annotations
    from transfer.detection.keypoints import filter_few_keypoints, keypoint_gt, load_keypoints, oks_sigmas

    keypoints = cfg.task == "keypoints"
    loaded, sets = [], []
    for spec in specs:
        annotations, images = root / str(spec.annotations), root / spec.folder
        for path in (annotations, images):
            if not path.exists():
                layout = (f"expected detectron2's layout: {spec.annotations} and {spec.folder}/ under {root}"
                          if spec.year else "a COCO-format file and its image folder, ANNOTATIONS.json:IMAGE_DIR")
                raise DatasetError(f"{spec.name}: {path} not found ({layout})"
                                   f"{found_elsewhere(root, spec, path)}")
        annotations_within(root, spec, annotations)
        # the images it keeps are checked (present, readable, of the annotated size) by load_data
        if keypoints:
            *found, points = load_keypoints(annotations, images.absolute(), check_files=False)
            sets.append(points)
        else:
            found = load_coco(annotations, images.absolute(), check_files=False)
        loaded.append((spec.name, annotations, found))
    class_names, mapping = loaded[-1][2][1], loaded[-1][2][2]
    train: list[dict[str, Any]] = []
    for index, (name, _, (dicts, names, _)) in enumerate(loaded[:-1]):
        if list(names) != list(class_names):
            raise DatasetError(f"{name}: its categories differ from {cfg.data.test}'s")
        if keypoints and sets[index].names != sets[-1].names:
            raise DatasetError(f"{name}: its keypoints differ from {cfg.data.test}'s")
        require_annotations(dicts, name)
        kept = [d for d in filter_empty(dicts) if trainable(d)]
        train += filter_few_keypoints(kept, cfg.detector.min_keypoints_per_image) if keypoints else kept
    test_name, gt, (test, _, _) = loaded[-1]
    require_annotations(test, test_name)
    standard = "DensePose-COCO " if cfg.task == "densepose" else "COCO "
    name = readable_name(cfg, specs, standard + "+".join(s.split for s in specs[:-1]))
    if not keypoints:
        return DetectionData(root, name, train, test, list(class_names), dict(mapping), gt)
    return DetectionData(root, name, train, test, list(class_names), dict(mapping),
                         keypoint_gt(test, class_names, mapping, sets[-1]), sets[-1],
                         oks_sigmas(sets[-1], cfg.detector.keypoint_oks_sigmas))


_EXIF_ORIENTATION = 0x0112
_SIZE_PROBLEMS_SHOWN = 3


def _image_size_problem(record: dict[str, Any]) -> str | None:
    """Why ``record``'s image disagrees with its annotation (size after EXIF rotation, as it is decoded), or None.

    Reads the file's header only; nothing is decoded.
    """
    path = record["file_name"]
    try:
        with Image.open(path) as image:
            width, height = image.size
            if image.getexif().get(_EXIF_ORIENTATION) in (5, 6, 7, 8):  # a quarter turn swaps the sides
                width, height = height, width
    except FileNotFoundError:
        return f"{path} is missing"
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        return f"{path} is not a readable image ({err.__class__.__name__})"
    if (width, height) != (record["width"], record["height"]):
        return f"{path} is {width}x{height} but its annotation says {record['width']}x{record['height']}"
    return None


def check_image_sizes(records: list[dict[str, Any]], *, workers: int = 8) -> None:
    """Before anything trains: every image exists, opens, and has the size its annotation gives (the boxes and
    masks are in those coordinates). A DatasetError counts the bad images and names the first few."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        problems = [p for p in pool.map(_image_size_problem, records, chunksize=64) if p]
    if problems:
        shown = "; ".join(problems[:_SIZE_PROBLEMS_SHOWN])
        more = f"; and {len(problems) - _SIZE_PROBLEMS_SHOWN} more" if len(problems) > _SIZE_PROBLEMS_SHOWN else ""
        raise DatasetError(f"{len(problems)} of {len(records)} images do not match their annotations: {shown}{more}")
