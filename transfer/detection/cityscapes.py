"""Cityscapes instance segmentation (``moco eval cityscapes``; arXiv 1911.05722 Table 6): data, metric, embedded.

Datasets: detectron2's names ``cityscapes_fine_instance_seg_{train,val}``, in its datasets/README layout under the
datasets root: images ``cityscapes/leftImg8bit/<split>/<city>/<city>_<seq>_<frame>_leftImg8bit.png`` and
annotations ``cityscapes/gtFine/<split>/<city>/<city>_<seq>_<frame>_gtFine_{instanceIds.png, labelIds.png,
polygons.json}``. As detectron2's ``load_cityscapes_instances(..., from_json=False)`` reads them: every id of
``instanceIds.png`` from 24 up is a segment, ``id // 1000`` its label id (ids under 1000 are the label id of a
crowd region); the segments of the 8 classes with instances (person, rider, car, truck, bus, train,
motorcycle, bicycle: label ids 24-28, 31-33) are kept, as masks (RLE), their box the mask's extent.
Deviation from detectron2: its boxes end at the last pixel's index (x1 = max x), ours at its far edge (max x + 1),
as our COCO reader has them; its png path also turns masks into polygons with OpenCV, ours keeps the masks.

The metric is cityscapesscripts' ``evalInstanceLevelSemanticLabeling`` (the optional ``cityscapes`` extra), fed
as detectron2's ``CityscapesInstanceEvaluator`` feeds it: one ``<image>_pred.txt`` per test image listing a
binary PNG mask, the label id and the score of each detection; its AP (over IoU 0.5:0.95) and AP50.

Embedded: :func:`ensure_cityscapes` writes the scenes of :mod:`transfer.embedded` (the 8 shapes standing for the
8 classes) in the layout above; the issue asks for no street-like layout.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from moco_core.config import ConfigError
from moco_core.data.data import DatasetError, show_value
from moco_core.user_files import all_within
from transfer import embedded
from transfer.detection.dataset_specs import DatasetSpec, DetectionData, found_elsewhere, readable_name
from transfer.detection.legacy_numpy import legacy_numpy

logger = logging.getLogger("moco.transfer")

# cityscapesscripts' helpers/labels.py: the classes with instances that are evaluated, by label id
CLASSES: dict[int, str] = {24: "person", 25: "rider", 26: "car", 27: "truck", 28: "bus", 31: "train",
                           32: "motorcycle", 33: "bicycle"}
IMAGE_SUFFIX = "_leftImg8bit.png"
ROAD = 7  # cityscapesscripts' label id of "road", a class without instances that is evaluated
_STANDARD = re.compile(r"cityscapes_fine_instance_seg_(train|val|test)")


def parse_name(name: str) -> DatasetSpec:
    """``name``'s image and annotation folders relative to the datasets root; ConfigError for any other name."""
    standard = _STANDARD.fullmatch(name)
    if not standard:
        raise ConfigError(f"data: dataset {show_value(name)} is not cityscapes_fine_instance_seg_<split> "
                          f"(cityscapes_fine_instance_seg_train, cityscapes_fine_instance_seg_val)")
    split = standard[1]
    return DatasetSpec(name, Path("cityscapes", "leftImg8bit", split), split,
                       Path("cityscapes", "gtFine", split), "fine")


def instances_of(instance_ids: np.ndarray) -> list[dict[str, Any]]:
    """The annotations of one ``gtFine_instanceIds`` map (H, W): ``category_id`` (contiguous, 0-7), ``iscrowd``,
    ``bbox`` [x0, y0, x1, y1] (pixel edges) and ``segmentation`` (compressed RLE)."""
    from pycocotools import mask as mask_utils  # the 'transfer' extra

    contiguous = {label: k for k, label in enumerate(CLASSES)}
    annotations = []
    for segment in np.unique(instance_ids[instance_ids >= 24]):  # ids under 24 are stuff labels
        label = int(segment) // 1000 if segment >= 1000 else int(segment)
        if label not in CLASSES:
            continue
        mask = instance_ids == segment
        rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
        rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
        annotations.append({"category_id": contiguous[label], "iscrowd": int(segment < 1000),
                            "bbox": [float(cols[0]), float(rows[0]), float(cols[-1] + 1), float(rows[-1] + 1)],
                            "segmentation": {"size": [int(v) for v in rle["size"]],
                                             "counts": rle["counts"].decode("ascii")},
                            "difficult": False})
    return annotations


def _files(image_dir: Path, gt_dir: Path, name: str) -> list[tuple[Path, Path]]:
    """(image, instanceIds) of every image under ``image_dir/<city>/``, sorted; DatasetError for a missing one."""
    pairs = []
    for image in sorted(image_dir.glob(f"*/*{IMAGE_SUFFIX}")):
        stem = image.name[: -len(IMAGE_SUFFIX)]
        instances = gt_dir / image.parent.name / f"{stem}_gtFine_instanceIds.png"
        if not instances.is_file():
            raise DatasetError(f"{name}: {instances} not found (the annotation of {image.name})")
        pairs.append((image, instances))
    if not pairs:
        raise DatasetError(f"{name}: no <city>/*{IMAGE_SUFFIX} image in {image_dir}")
    for folder, files in ((image_dir, [i for i, _ in pairs]), (gt_dir, [g for _, g in pairs])):
        all_within(folder, files, what=f"{name}: file", error=DatasetError)  # a city folder linked elsewhere
    return pairs


def _dicts(pairs: list[tuple[Path, Path]]) -> list[dict[str, Any]]:
    dicts = []
    for image, instances in pairs:
        try:
            with Image.open(instances) as png:
                ids = np.asarray(png, dtype=np.int64)
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:  # the pixel limit too
            raise DatasetError(f"{instances} is not a readable PNG ({err.__class__.__name__})") from None
        if ids.ndim != 2:
            raise DatasetError(f"{instances}: expected a single-channel id map, found shape {ids.shape}")
        dicts.append({"file_name": str(image.absolute()), "image_id": image.name[: -len(IMAGE_SUFFIX)],
                      "height": int(ids.shape[0]), "width": int(ids.shape[1]), "annotations": instances_of(ids)})
    return dicts


def load_cityscapes_data(cfg: Any, root: Path, specs: list[DatasetSpec]) -> DetectionData:
    """The configured Cityscapes sets under ``root``: training images with an object, every test image."""
    sets = []
    for spec in specs:
        images, gt = root / spec.folder, root / str(spec.annotations)
        for path in (images, gt):
            if not path.is_dir():
                raise DatasetError(f"{spec.name}: {path} not found (expected detectron2's layout: {spec.folder}/ and "
                                   f"{spec.annotations}/ under {root}){found_elsewhere(root, spec, path)}")
        sets.append(_dicts(_files(images, gt, spec.name)))
    train = [d for dicts in sets[:-1] for d in dicts if any(not a["iscrowd"] for a in d["annotations"])]
    if not train:
        raise DatasetError(f"{'+'.join(cfg.data.train)}: no annotated object of the 8 instance classes")
    name = readable_name(cfg, specs, "Cityscapes " + "+".join(f"{s.split}_fine" for s in specs[:-1]))
    return DetectionData(root, name, train, sets[-1], list(CLASSES.values()), dict(enumerate(CLASSES)),
                         root / str(specs[-1].annotations))


def _require_cityscapesscripts() -> Any:
    try:
        from cityscapesscripts.evaluation import evalInstanceLevelSemanticLabeling
    except ImportError:
        raise ImportError("Cityscapes evaluation needs cityscapesscripts: pip install -e '.[cityscapes]'") from None
    return evalInstanceLevelSemanticLabeling


def write_predictions(results: list[dict[str, Any]], image_ids: list[str], folder: Path) -> None:
    """cityscapesscripts' input: ``<image>_pred.txt`` for every test image (empty without detections), each line
    ``<mask png> <label id> <score>``, the mask a 0/255 PNG of the image's size (detectron2's format)."""
    from pycocotools import mask as mask_utils

    lines: dict[str, list[str]] = {image_id: [] for image_id in image_ids}
    for k, result in enumerate(results):
        with warnings.catch_warnings():  # pycocotools' NumPy 2 copy-keyword notice
            warnings.simplefilter("ignore", DeprecationWarning)
            mask = mask_utils.decode(result["segmentation"]).astype(np.uint8)
        png = f"{result['image_id']}_{k}_{CLASSES[result['category_id']]}.png"
        Image.fromarray(mask * 255).save(folder / png)
        lines[result["image_id"]].append(f"{png} {result['category_id']} {result['score']}\n")
    for image_id, text in lines.items():
        (folder / f"{image_id}_pred.txt").write_text("".join(text), encoding="utf-8")


def cityscapes_evaluate(results: list[dict[str, Any]], data: DetectionData) -> dict[str, float]:
    """Instance-level mask AP and AP50 in percent (``segm_AP``, ``segm_AP50``) by cityscapesscripts.

    ``results``: COCO-style dicts (``image_id`` the test dicts', ``category_id`` the label id, ``segmentation`` a
    compressed RLE, ``score``); the ground truth is every ``*_gtFine_instanceIds.png`` under ``data.coco_gt``.
    """
    cs_eval = _require_cityscapesscripts()
    gt_images = sorted(str(p) for p in Path(str(data.coco_gt)).glob("*/*_gtFine_instanceIds.png"))
    if not gt_images:
        raise DatasetError(f"no */*_gtFine_instanceIds.png under {data.coco_gt}: nothing to evaluate against")
    with tempfile.TemporaryDirectory(prefix="moco-cityscapes-") as tmp:
        write_predictions(results, [d["image_id"] for d in data.test], Path(tmp))
        args = cs_eval.args  # the module's settings, set as detectron2's evaluator sets them
        args.predictionPath, args.predictionWalk = str(Path(tmp).absolute()), None
        args.JSONOutput, args.colorized, args.quiet = False, False, True
        args.gtInstancesFile = str(Path(tmp) / "gtInstances.json")
        text = io.StringIO()
        with contextlib.redirect_stdout(text), legacy_numpy("in1d"), _json_in(cs_eval, Path(tmp)):
            predictions = [cs_eval.getPrediction(gt, args) for gt in gt_images]
            averages = cs_eval.evaluateImgLists(predictions, gt_images, args)["averages"]
        logger.info("Cityscapes instance evaluation:\n%s", text.getvalue())
    return {"segm_AP": float(averages["allAp"]) * 100.0, "segm_AP50": float(averages["allAp50%"]) * 100.0}


def _plain(value: Any) -> Any:
    """cityscapesscripts' JSON fallback (an object's ``__dict__``), and NumPy scalars as Python numbers."""
    return value.item() if isinstance(value, np.generic) else value.__dict__


@contextlib.contextmanager
def _json_in(cs_eval: Any, folder: Path) -> Iterator[None]:
    """cityscapesscripts 2.3.0 writes its matches to ``matches.json`` in the working directory, with a JSON encoder
    that fails on the NumPy integers NumPy 2 returns from its pixel counts. While it runs, its ``writeDict2JSON``
    writes relative names into ``folder`` (the temporary prediction folder) and NumPy scalars as numbers; the
    evaluation itself is untouched."""
    original = cs_eval.writeDict2JSON

    def write(data: Any, name: str) -> None:
        path = Path(name) if Path(name).is_absolute() else folder / name
        path.write_text(json.dumps(data, default=_plain, sort_keys=True, indent=4), encoding="utf-8")

    cs_eval.writeDict2JSON = write
    try:
        yield
    finally:
        cs_eval.writeDict2JSON = original


# ---- the embedded set ----

_CITIES = {"train": ("alpha", "beta"), "val": ("gamma",)}  # no "_" in a city: cityscapesscripts splits names on it


def _write_cityscapes(target: Path, counts: dict[str, int], size: int, seed: int) -> None:
    labels = list(CLASSES)  # shape k stands for the k-th class
    for split, scene_split in (("train", "train"), ("val", "test")):
        cities = _CITIES[split]
        for n, (image, objects) in enumerate(embedded.scenes(scene_split, counts[split], size=size, seed=seed)):
            city = cities[n % len(cities)]
            stem = f"{city}_{n // len(cities):06d}_000019"
            image_dir, gt_dir = (target / "cityscapes" / kind / split / city for kind in ("leftImg8bit", "gtFine"))
            image_dir.mkdir(parents=True, exist_ok=True)
            gt_dir.mkdir(parents=True, exist_ok=True)
            image.save(image_dir / f"{stem}{IMAGE_SUFFIX}")
            # the background is "road" (label id 7), not the void "unlabeled" (0): cityscapesscripts ignores a
            # false positive lying mostly on void pixels, and real Cityscapes images are labelled nearly everywhere
            ids = np.full((size, size), ROAD, dtype=np.uint16)
            polygons = []
            for k, obj in enumerate(objects):  # drawing order: a later object covers an earlier one
                label = labels[obj["category_id"]]
                ids[obj["mask"]] = label * 1000 + k
                polygons.append({"label": CLASSES[label], "polygon": obj["outline"].round().astype(int).tolist()})
            Image.fromarray(ids).save(gt_dir / f"{stem}_gtFine_instanceIds.png")
            labels_map = np.where(ids >= 1000, ids // 1000, ids).astype(np.uint8)
            Image.fromarray(labels_map).save(gt_dir / f"{stem}_gtFine_labelIds.png")
            (gt_dir / f"{stem}_gtFine_polygons.json").write_text(json.dumps(
                {"imgHeight": size, "imgWidth": size, "objects": polygons}), encoding="utf-8")


def ensure_cityscapes(root: Path | None = None, *, train: int = embedded.DEFAULT_TRAIN,
                      val: int = embedded.DEFAULT_TEST, size: int = embedded.DEFAULT_SIZE, seed: int = 0) -> Path:
    """A directory holding ``cityscapes/`` of the scenes (same default root as the VOC and COCO layouts)."""
    return embedded.ensure("cityscapes", _write_cityscapes, root, {"train": train, "val": val}, size, seed)
