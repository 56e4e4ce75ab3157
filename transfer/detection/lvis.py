"""LVIS instance segmentation (``moco eval lvis``; arXiv 1911.05722 appendix A.4): data, metric, embedded set.

Datasets (``data.train`` / ``data.test``):

* detectron2's names ``lvis_v0.5_{train,val}`` (and ``lvis_v1_*``): ``lvis/lvis_v0.5_train.json`` under the
  datasets root with the COCO 2017 images, ``coco/train2017/`` and ``coco/val2017/`` (detectron2's
  datasets/README). As detectron2's ``load_lvis_json``, an image's file is ``coco/<split folder>/<file>`` taken
  from the last two parts of its ``coco_url``;
* an LVIS-format file of one's own, ``ANNOTATIONS.json:IMAGE_DIR`` (an image with a ``coco_url`` is in
  ``IMAGE_DIR/<split folder>/``, otherwise at ``IMAGE_DIR/<file_name>``).

The JSON is read by :func:`transfer.detection.coco.parse_coco` (category ids, sorted, become 0..C-1: LVIS's
1..1230 become id - 1, as in detectron2), after the fields the LVIS API needs are checked: every category's
``frequency`` (r, c or f) and every image's ``neg_category_ids`` and ``not_exhaustive_category_ids``. Those
two lists are LVIS's federated annotation: a detection of a category neither annotated in an image nor listed
as absent from it is not scored; in a not-exhaustive category, unmatched detections are not false positives. The
official evaluator (:func:`lvis_evaluate`, the ``lvis`` package) applies them; training ignores them, as
detectron2 does. Up to 300 detections per image are scored (LVIS's rule, ``TEST.DETECTIONS_PER_IMAGE``).

Embedded: :func:`ensure_lvis` writes the scenes of :mod:`transfer.embedded` with 16 long-tailed classes (the 8
shapes, solid or with a ring's grey window; class k drawn with probability proportional to (k+1)^-1.6) in the real
layout above.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import re
import shutil
import tempfile
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from moco_core import user_files
from moco_core.config import ConfigError
from moco_core.data import shapes
from moco_core.data.data import DatasetError, show_value
from moco_core.data.scenes import Kinds
from transfer import embedded
from transfer.detection.coco import filter_empty, parse_coco, require_annotations
from transfer.detection.dataset_specs import (
    DatasetSpec,
    DetectionData,
    annotations_within,
    found_elsewhere,
    readable_name,
    trainable,
)
from transfer.detection.legacy_numpy import legacy_numpy

logger = logging.getLogger("moco.transfer")

LVIS_METRICS = ("AP", "AP50", "AP75", "APs", "APm", "APl", "APr", "APc", "APf")  # LVISEval.get_results()
MAX_DETECTIONS = 300  # LVIS scores up to 300 detections per image (the lvis package's default)
FREQUENCIES = ("r", "c", "f")  # rare: 1-10 training images, common: 11-100, frequent: more (LVIS's groups)

_STANDARD = re.compile(r"lvis_(v0\.5|v1)_(train|val)")
_CUSTOM = re.compile(r"(.+\.json):(.+)")


def parse_name(name: str) -> DatasetSpec:
    """``name``'s files relative to the datasets root (module docstring); ConfigError for any other form."""
    standard = _STANDARD.fullmatch(name)
    if standard:
        return DatasetSpec(name, Path("coco"), name, Path("lvis", f"{name}.json"), standard[1])
    custom = _CUSTOM.fullmatch(name)
    if custom:
        return DatasetSpec(name, Path(custom[2]), Path(custom[1]).stem, Path(custom[1]))
    raise ConfigError(f"data: dataset {show_value(name)} is neither lvis_v0.5_<split> (lvis_v0.5_train, lvis_v0.5_val) "
                      f"nor ANNOTATIONS.json:IMAGE_DIR, an LVIS-format file and its images")


def _ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def parse_lvis(doc: Any, image_root: Path, *, where: str = "<json>") -> tuple[list[dict], list[str], dict[int, int]]:
    """:func:`transfer.detection.coco.parse_coco` for an LVIS document: (dicts, class names, contiguous -> LVIS id).

    Each dict also holds its image's ``neg_category_ids`` and ``not_exhaustive_category_ids`` (LVIS ids).
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), list) or not isinstance(
            doc.get("categories"), list):
        raise DatasetError(f"{where}: expected an LVIS JSON object with 'images' and 'categories' lists")
    for index, cat in enumerate(doc["categories"]):
        if not isinstance(cat, dict) or cat.get("frequency") not in FREQUENCIES:
            found = show_value(cat.get("frequency")) if isinstance(cat, dict) else "not an object"
            raise DatasetError(f"{where}: categories[{index}] needs a 'frequency' of r, c or f (LVIS's evaluator "
                               f"groups categories by it), got {found}")
    images = []
    for index, img in enumerate(doc["images"]):
        if not isinstance(img, dict):
            raise DatasetError(f"{where}: images[{index}] is a {type(img).__name__}, expected an object")
        for key in ("neg_category_ids", "not_exhaustive_category_ids"):
            if not _ids(img.get(key)):
                raise DatasetError(f"{where}: image {show_value(img.get('id'))}: {key!r} must be a list of category "
                                   f"ids (LVIS's federated annotation), got {show_value(img.get(key))}")
        url = img.get("coco_url")
        if isinstance(url, str) and url.count("/") >= 1:
            img = {**img, "file_name": "/".join(url.split("/")[-2:])}  # detectron2: <split folder>/<file>
        images.append(img)
    dicts, names, mapping = parse_coco({**doc, "images": images}, image_root, where=where)
    lists = {img["id"]: img for img in images}
    for d in dicts:
        d["neg_category_ids"] = list(lists[d["image_id"]]["neg_category_ids"])
        d["not_exhaustive_category_ids"] = list(lists[d["image_id"]]["not_exhaustive_category_ids"])
    return dicts, names, mapping


def _read_json(path: Path) -> Any:
    return user_files.read_json(path, limit=user_files.ANNOTATION_LIMIT, what="LVIS annotation file",
                                error=DatasetError)


def load_lvis_data(cfg: Any, root: Path, specs: list[DatasetSpec]) -> DetectionData:
    """The configured LVIS sets under ``root``: training images with an object, every test image."""
    loaded = []
    for spec in specs:
        annotations, images = root / str(spec.annotations), root / spec.folder
        for path in (annotations, images):
            if not path.exists():
                layout = (f"expected detectron2's layout: {spec.annotations} and the COCO images in {spec.folder}/"
                          f"{{train,val}}2017/ under {root}" if spec.year else
                          "an LVIS-format file and its image folder, ANNOTATIONS.json:IMAGE_DIR")
                raise DatasetError(f"{spec.name}: {path} not found ({layout}){found_elsewhere(root, spec, path)}")
        annotations_within(root, spec, annotations)
        loaded.append((spec.name, annotations,
                       parse_lvis(_read_json(annotations), images.absolute(), where=str(annotations))))
    test_name, gt, (test, class_names, mapping) = loaded[-1]
    train: list[dict[str, Any]] = []
    for name, _, (dicts, names, _) in loaded[:-1]:
        if list(names) != list(class_names):
            raise DatasetError(f"{name}: its categories differ from {cfg.data.test}'s")
        require_annotations(dicts, name)
        train += [d for d in filter_empty(dicts) if trainable(d)]
    require_annotations(test, test_name)
    name = readable_name(cfg, specs, "LVIS " + "+".join(s.split.removeprefix("lvis_") for s in specs[:-1]))
    return DetectionData(root, name, train, test, list(class_names), dict(mapping), gt)


def _require_lvis() -> None:
    try:
        import lvis  # noqa: F401
    except ImportError:
        raise ImportError("LVIS evaluation needs the official LVIS API: pip install -e '.[lvis]'") from None


def lvis_evaluate(results: Sequence[dict[str, Any]], gt_path: Path | str, iou_types: Sequence[str] = ("bbox", "segm"),
                  *, max_detections: int = MAX_DETECTIONS) -> dict[str, float]:
    """LVIS AP in percent by the official API: ``{iou_type}_{AP, AP50, AP75, APs, APm, APl, APr, APc, APf}``.

    ``results`` are COCO-style result dicts with the annotation file's category ids (``segmentation`` an RLE for
    "segm"); ``gt_path`` the LVIS JSON. As detectron2's LVISEvaluator: the best ``max_detections`` of each image
    are kept, and for "segm" the box is dropped so that the area ranges are the masks'. No result gives 0; a
    value the API leaves undefined (-1: no ground truth there) is NaN.
    """
    _require_lvis()
    from lvis import LVIS, LVISEval, LVISResults

    with contextlib.redirect_stdout(io.StringIO()):
        gt = LVIS(str(gt_path))
    metrics: dict[str, float] = {}
    for iou_type in iou_types:
        chosen = [{k: v for k, v in r.items() if not (iou_type == "segm" and k == "bbox")} for r in results]
        if not chosen:
            metrics.update({f"{iou_type}_{name}": 0.0 for name in LVIS_METRICS})
            continue
        text = io.StringIO()
        with contextlib.redirect_stdout(text), _quiet("lvis"), legacy_numpy("float"), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # lvis' logger.warn
            evaluator = LVISEval(gt, LVISResults(gt, chosen, max_dets=max_detections), iou_type)
            evaluator.run()
            evaluator.print_results()
        logger.info("LVIS %s evaluation:\n%s", iou_type, text.getvalue())
        found = evaluator.get_results()
        for name in LVIS_METRICS:
            value = float(found[name])
            metrics[f"{iou_type}_{name}"] = value * 100.0 if value >= 0 else math.nan
    return metrics


@contextlib.contextmanager
def _quiet(name: str) -> Any:
    """The lvis package logs every step at INFO and warns that results are "assumed correct": silenced here."""
    log = logging.getLogger(name)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


# ---- the embedded LVIS-like set ----

LVIS_EMBEDDED_VERSION = 2  # bump whenever the files written here change (1: 24 classes, 8 shapes x 3 colours)
_STREAM = 35  # the LVIS-like scenes' own random streams
_TAIL = 1.6  # class k (0-based) is drawn with probability proportional to (k + 1) ** -_TAIL
_STYLES = (("solid", 0.0), ("ring", 0.5))  # a class's name suffix and its window (Kinds.windows)
_NEG_FRACTION = 0.5  # each category absent from an image is listed in its neg_category_ids with this probability


def embedded_kinds() -> tuple[list[str], Kinds]:
    """The 16 classes (names "<shape>_solid", "<shape>_ring") in frequency order, and how the scenes draw them.

    Classes differ by shape and by the grey window a ring has, never by colour: the pretraining's colour
    augmentation teaches a backbone to ignore colour (lvis scenes v1 had 3 colours of each shape, and MoCo's
    backbone scored below random init on it)."""
    pairs = [(s, style) for style in range(len(_STYLES)) for s in shapes.CLASSES]
    order = np.random.default_rng(_STREAM).permutation(len(pairs))  # frequency is not tied to shape or style
    pairs = [pairs[k] for k in order]
    weights = np.arange(1, len(pairs) + 1, dtype=np.float64) ** -_TAIL
    names = [f"{s}_{_STYLES[style][0]}" for s, style in pairs]
    kinds = Kinds(tuple(s for s, _ in pairs), tuple(_STYLES[style][1] for _, style in pairs),
                           tuple(float(w) for w in weights / weights.sum()))
    return names, kinds


def embedded_version() -> str:
    """The embedded set's version, for records: the LVIS-like layer and the scenes under it."""
    return f"lvis scenes v{LVIS_EMBEDDED_VERSION} (scenes v{embedded.EMBEDDED_VERSION})"


def _frequency(images: int) -> str:
    return "r" if images <= 10 else "c" if images <= 100 else "f"


def _write_lvis(target: Path, counts: dict[str, int], size: int, seed: int) -> None:
    names, kinds = embedded_kinds()
    categories = [{"id": k + 1, "name": name, "synset": f"{name}.n.01", "frequency": "r", "image_count": 0,
                   "instance_count": 0} for k, name in enumerate(names)]
    docs = {}
    for split, scene_split, offset in (("train", "train", 0), ("val", "test", 500000)):
        folder = target / "coco" / f"{split}2017"
        folder.mkdir(parents=True)
        rng = np.random.default_rng(np.random.SeedSequence([seed, _STREAM, offset]))  # the neg lists' draws
        images, annotations = [], []
        for n, (image, objects) in enumerate(embedded.scenes(scene_split, counts[split], size=size, seed=seed,
                                                             kinds=kinds, stream=_STREAM)):
            image_id, file_name = offset + n + 1, f"{offset + n + 1:012d}.jpg"
            image.save(folder / file_name, format="JPEG", quality=embedded.JPEG_QUALITY)
            present = {obj["category_id"] + 1 for obj in objects}
            absent = [c["id"] for c in categories if c["id"] not in present]
            neg = [c for c, keep in zip(absent, rng.random(len(absent)) < _NEG_FRACTION, strict=True) if keep]
            images.append({"id": image_id, "width": size, "height": size, "file_name": file_name,
                           "coco_url": f"http://images.cocodataset.org/{split}2017/{file_name}",
                           "neg_category_ids": neg, "not_exhaustive_category_ids": []})
            for obj in objects:
                x0, y0, x1, y1 = obj["bbox"]
                annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                    "category_id": obj["category_id"] + 1, "bbox": [x0, y0, x1 - x0, y1 - y0],
                                    "segmentation": embedded.rle(obj["mask"]), "area": float(obj["mask"].sum())})
        docs[split] = {"info": {"description": f"moco embedded LVIS-like scenes, {embedded_version()}"},
                       "images": images, "annotations": annotations}
    # LVIS's frequency groups count the training images a category appears in
    images_with = Counter(c for _, c in {(a["image_id"], a["category_id"]) for a in docs["train"]["annotations"]})
    for cat in categories:
        cat.update(frequency=_frequency(images_with[cat["id"]]), image_count=images_with[cat["id"]],
                   instance_count=sum(a["category_id"] == cat["id"] for a in docs["train"]["annotations"]))
    (target / "lvis").mkdir()
    for split, doc in docs.items():
        with open(target / "lvis" / f"lvis_v0.5_{split}.json", "w", encoding="utf-8") as f:
            json.dump({**doc, "categories": categories}, f, separators=(",", ":"))


def ensure_lvis(root: Path | None = None, *, train: int = embedded.DEFAULT_TRAIN, val: int = embedded.DEFAULT_TEST,
                size: int = embedded.DEFAULT_SIZE, seed: int = 0) -> Path:
    """A datasets root holding ``lvis/lvis_v0.5_{train,val}.json`` and ``coco/{train,val}2017/`` of the LVIS-like
    scenes, generated on first use. Without ``root``: ``$MOCO_DATA_HOME/lvis-scenes-v...``; a root whose ``DONE``
    does not match these parameters is rewritten."""
    if min(train, val) < 1 or size < 32 or seed < 0:
        raise ValueError(f"image counts must be >= 1, size >= 32 and seed >= 0, got {train}, {val}, size={size}, "
                         f"seed={seed}")
    if root is None:
        root = shapes.data_home() / (f"lvis-scenes-v{LVIS_EMBEDDED_VERSION}.{embedded.EMBEDDED_VERSION}-seed{seed}-"
                                     f"{size}px-{train}x{val}")
    root = Path(root)
    stamp = json.dumps({"version": embedded_version(), "seed": seed, "size": size, "train": train, "val": val},
                       sort_keys=True) + "\n"
    if _read(root / "DONE") == stamp:
        return root
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".tmp", dir=root.parent))
        try:
            _write_lvis(tmp, {"train": train, "val": val}, size, seed)
            (tmp / "DONE").write_text(stamp, encoding="utf-8")
            if _read(root / "DONE") != stamp:  # else another process finished first
                if root.exists():
                    shutil.rmtree(root)
                os.replace(tmp, root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as err:
        raise DatasetError(f"cannot write the embedded LVIS dataset in {root}: {err.strerror or err} (set "
                           f"MOCO_DATA_HOME to a writable folder)") from None
    return root


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None
