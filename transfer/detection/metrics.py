"""Detection metrics: PASCAL VOC AP as detectron2 reports it for VOC2007 test, and COCO AP through pycocotools.

VOC (:func:`voc_evaluate`), per class and IoU threshold, following the VOC devkit as detectron2's
``PascalVOCDetectionEvaluator`` runs it: detections sorted by score; each is matched to the ground-truth box
of its image and class with the highest IoU; it is a true positive if that IoU is > the threshold (strictly),
the box is not difficult and not yet matched; a duplicate (box already matched) or a low IoU is a false
positive; a match to a *difficult* box is neither. Recall divides by the number of non-difficult boxes.
VOC2007 uses the 11-point interpolated AP (max precision at recall >= 0, 0.1, ..., 1, averaged). AP50 and AP75
are the class-mean APs at IoU 0.5 and 0.75; AP is the mean over IoU 0.50:0.05:0.95 of the class-mean APs.

A class without non-difficult ground truth gets AP 0 and still counts in the mean: that is what detectron2's
11-point computation gives (its recall is 0/0 = NaN, no recall threshold is reached). Deviations from
detectron2: detections tied in score keep their given order (numpy's default sort there is not stable), and
scores and boxes are used at full precision (detectron2 writes them to text files with 3 and 1 decimals).
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from moco_core.data.data import DatasetError

logger = logging.getLogger("moco.transfer")

VOC_IOU_THRESHOLDS: tuple[float, ...] = tuple(t / 100.0 for t in range(50, 100, 5))  # as detectron2 loops them
COCO_METRICS: tuple[str, ...] = ("AP", "AP50", "AP75", "APs", "APm", "APl")  # COCOeval.stats[0:6], in order

Detection = tuple[Hashable, float, float, float, float, float]  # (image_id, score, x0, y0, x1, y1)


def _devkit_overlaps(det: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """IoU of paired rows (n, 4) in the devkit's 1-based inclusive convention, (n,).

    Boxes come in our 0-based convention ``[xmin - 1, ymin - 1, xmax, ymax]``; adding the 1 back gives the
    devkit's numbers (what detectron2's evaluator writes and reads), and its ``+1`` widths then count pixels.
    """
    d = det + np.array([1.0, 1.0, 0.0, 0.0])
    g = gt + np.array([1.0, 1.0, 0.0, 0.0])
    iw = np.maximum(np.minimum(d[:, 2], g[:, 2]) - np.maximum(d[:, 0], g[:, 0]) + 1.0, 0.0)
    ih = np.maximum(np.minimum(d[:, 3], g[:, 3]) - np.maximum(d[:, 1], g[:, 1]) + 1.0, 0.0)
    inter = iw * ih
    union = ((d[:, 2] - d[:, 0] + 1.0) * (d[:, 3] - d[:, 1] + 1.0)
             + (g[:, 2] - g[:, 0] + 1.0) * (g[:, 3] - g[:, 1] + 1.0) - inter)
    return inter / union


def voc_ap(recall: np.ndarray, precision: np.ndarray, *, use_07_metric: bool = True) -> float:
    """AP (0-1) from cumulative recall and precision arrays in score order (the devkit's ``voc_ap``)."""
    if use_07_metric:
        ap = 0.0
        for t in np.arange(0.0, 1.1, 0.1):  # the devkit's 11 points, floating-point values as numpy makes them
            reached = recall >= t
            ap += (float(np.max(precision[reached])) if reached.any() else 0.0) / 11.0
        return ap
    mrec = np.concatenate(([0.0], recall, [1.0]))
    mpre = np.concatenate(([0.0], precision, [0.0]))
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]  # precision envelope: max precision at any higher recall
    changes = np.where(mrec[1:] != mrec[:-1])[0]
    return float(np.sum((mrec[changes + 1] - mrec[changes]) * mpre[changes + 1]))


def _best_overlaps(det_img: np.ndarray, det_boxes: np.ndarray, gt_img: np.ndarray,
                   gt_boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each detection: the max IoU with a GT box of its image, and that box's index (-1 if none).

    Ties go to the first box, as ``np.argmax`` does in the devkit. GT must be sorted by image.
    """
    n = len(det_img)
    ovmax, jmax = np.full(n, -np.inf), np.full(n, -1, dtype=np.int64)
    if n == 0 or len(gt_img) == 0:
        return ovmax, jmax
    start = np.searchsorted(gt_img, det_img, side="left")
    count = np.searchsorted(gt_img, det_img, side="right") - start  # (n,) GT boxes in each detection's image
    pair_det = np.repeat(np.arange(n), count)
    pair_gt = np.repeat(start, count) + (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count))
    if len(pair_det) == 0:
        return ovmax, jmax
    iou = _devkit_overlaps(det_boxes[pair_det], gt_boxes[pair_gt])
    order = np.lexsort((pair_gt, -iou, pair_det))  # per detection: highest IoU first, then lowest GT index
    first = order[np.unique(pair_det[order], return_index=True)[1]]
    ovmax[pair_det[first]] = iou[first]
    jmax[pair_det[first]] = pair_gt[first]
    return ovmax, jmax


def _class_aps(dets: Sequence[Detection], image_index: Mapping[Hashable, int], gt_img: np.ndarray,
               gt_boxes: np.ndarray, gt_difficult: np.ndarray, *, use_07_metric: bool) -> list[float]:
    """AP (0-1) of one class at each of VOC_IOU_THRESHOLDS."""
    npos = int((~gt_difficult).sum())
    if npos == 0:
        return [0.0] * len(VOC_IOU_THRESHOLDS)
    scores = np.array([d[1] for d in dets], dtype=np.float64)
    det_img = np.array([image_index[d[0]] for d in dets], dtype=np.int64)
    det_boxes = np.array([d[2:6] for d in dets], dtype=np.float64).reshape(-1, 4)
    order = np.argsort(-scores, kind="stable")
    det_img, det_boxes = det_img[order], det_boxes[order]
    ovmax, jmax = _best_overlaps(det_img, det_boxes, gt_img, gt_boxes)
    difficult = np.where(jmax >= 0, gt_difficult[np.maximum(jmax, 0)], False)
    aps = []
    for threshold in VOC_IOU_THRESHOLDS:
        above = ovmax > threshold
        candidate = above & ~difficult  # matched to a non-difficult box: TP if first to claim it, else duplicate
        tp = np.zeros(len(dets))
        idx = np.flatnonzero(candidate)
        tp[idx[np.unique(jmax[idx], return_index=True)[1]]] = 1.0
        fp = (~above | candidate).astype(np.float64) - tp  # a difficult match (above & difficult) is neither
        tp_cum, fp_cum = np.cumsum(tp), np.cumsum(fp)
        recall = tp_cum / npos
        precision = tp_cum / np.maximum(tp_cum + fp_cum, np.finfo(np.float64).eps)
        aps.append(voc_ap(recall, precision, use_07_metric=use_07_metric))
    return aps


def voc_evaluate(detections: Mapping[int, Sequence[Detection]], dataset_dicts: Sequence[dict[str, Any]],
                 class_names: Sequence[str], *, use_07_metric: bool = True) -> dict[str, Any]:
    """VOC AP in percent: ``{"AP50", "AP", "AP75", "per_class_AP50": {name: AP50}}``.

    ``detections[category_id]`` lists ``(image_id, score, x0, y0, x1, y1)`` in the dataset dicts' coordinates;
    ``dataset_dicts`` (from :func:`transfer.detection.voc.load_voc`) are the ground truth, difficult boxes included.
    """
    image_index: dict[Hashable, int] = {}
    for d in dataset_dicts:
        if d["image_id"] in image_index:
            raise ValueError(f"image_id {d['image_id']!r} appears twice in the dataset dicts")
        image_index[d["image_id"]] = len(image_index)
    num_classes = len(class_names)
    bad = [c for c in detections if not (isinstance(c, (int, np.integer)) and 0 <= c < num_classes)]
    if bad:
        raise ValueError(f"detections for category {bad[0]!r}: category ids must be 0..{num_classes - 1}")
    gt: list[list[tuple[int, list[float], bool]]] = [[] for _ in range(num_classes)]
    for d in dataset_dicts:
        for ann in d["annotations"]:
            gt[ann["category_id"]].append((image_index[d["image_id"]], ann["bbox"], bool(ann.get("difficult"))))
    if not any(not difficult for per_class in gt for *_, difficult in per_class):
        raise DatasetError(f"no ground-truth object (other than difficult ones) in {len(dataset_dicts)} images: "
                           f"nothing to evaluate against")
    per_threshold = np.zeros((len(VOC_IOU_THRESHOLDS), num_classes))
    for c in range(num_classes):
        dets = list(detections.get(c, ()))
        unknown = [det[0] for det in dets if det[0] not in image_index]
        if unknown:
            raise ValueError(f"a detection of class {class_names[c]!r} is for image {unknown[0]!r}, which is "
                             f"not in the dataset dicts")
        rows = sorted(gt[c], key=lambda r: r[0])  # stable: GT order within an image is kept
        gt_img = np.array([r[0] for r in rows], dtype=np.int64)
        gt_boxes = np.array([r[1] for r in rows], dtype=np.float64).reshape(-1, 4)
        gt_difficult = np.array([r[2] for r in rows], dtype=bool)
        per_threshold[:, c] = _class_aps(dets, image_index, gt_img, gt_boxes, gt_difficult,
                                         use_07_metric=use_07_metric)
    class_mean = 100.0 * per_threshold.mean(axis=1)  # (thresholds,)
    ap50 = 100.0 * per_threshold[VOC_IOU_THRESHOLDS.index(0.5)]
    return {"AP50": float(class_mean[0]), "AP": float(class_mean.mean()),
            "AP75": float(class_mean[VOC_IOU_THRESHOLDS.index(0.75)]),
            "per_class_AP50": {name: float(v) for name, v in zip(class_names, ap50, strict=True)}}


def _require_pycocotools() -> None:
    """Fail with the install command, not a bare ModuleNotFoundError, where the ``transfer`` extra is missing."""
    try:
        import pycocotools  # noqa: F401
    except ImportError:
        raise ImportError("COCO evaluation needs pycocotools: pip install -e '.[transfer]'") from None


def _polygon_area(polygons: Sequence[Sequence[float]], height: int, width: int) -> float:
    from pycocotools import mask as mask_util

    rles = mask_util.frPyObjects([list(p) for p in polygons], height, width)
    return float(mask_util.area(mask_util.merge(rles)))


def dicts_to_coco(dicts: Sequence[dict[str, Any]], class_names: Sequence[str],
                  contiguous_to_original: Mapping[int, int] | None = None) -> Any:
    """An in-memory pycocotools ``COCO`` ground truth from dataset dicts (category ids mapped back to original).

    ``area`` is the mask's pixel area where there is a segmentation (as in COCO), else the box's. Annotation
    ids start at 1: COCOeval takes id 0 for "unmatched".
    """
    _require_pycocotools()
    from pycocotools import mask as mask_util
    from pycocotools.coco import COCO

    to_original = dict(contiguous_to_original) if contiguous_to_original is not None else {
        i: i for i in range(len(class_names))}
    images, annotations = [], []
    for d in dicts:
        height, width = int(d["height"]), int(d["width"])
        images.append({"id": d["image_id"], "file_name": str(d["file_name"]), "height": height, "width": width})
        for ann in d["annotations"]:
            x0, y0, x1, y1 = (float(v) for v in ann["bbox"])
            record = {"id": len(annotations) + 1, "image_id": d["image_id"],
                      "category_id": to_original[ann["category_id"]], "bbox": [x0, y0, x1 - x0, y1 - y0],
                      "iscrowd": int(ann.get("iscrowd", 0)), "area": (x1 - x0) * (y1 - y0)}
            segm = ann.get("segmentation")
            if isinstance(segm, dict):
                record["segmentation"] = segm
                record["area"] = float(mask_util.area(segm))
            elif segm:
                record["segmentation"] = [list(p) for p in segm]
                record["area"] = _polygon_area(segm, height, width)
            annotations.append(record)
    categories = [{"id": to_original[i], "name": name} for i, name in enumerate(class_names)]
    coco = COCO()
    coco.dataset = {"images": images, "annotations": annotations, "categories": categories}
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco


def empty_results(coco_gt: Any) -> Any:
    """A result set with no detection (pycocotools' ``loadRes`` cannot make one: it indexes the first result)."""
    from pycocotools.coco import COCO

    empty = COCO()
    empty.dataset = {"images": list(coco_gt.dataset["images"]), "categories": list(coco_gt.dataset["categories"]),
                     "annotations": []}
    with contextlib.redirect_stdout(io.StringIO()):
        empty.createIndex()
    return empty


def check_results(results: Sequence[dict[str, Any]], coco_gt: Any) -> None:
    image_ids, category_ids = set(coco_gt.getImgIds()), set(coco_gt.getCatIds())
    for r in results:
        if r.get("image_id") not in image_ids:
            raise ValueError(f"a result is for image_id {r.get('image_id')!r}, which the ground truth lacks")
        if r.get("category_id") not in category_ids:
            raise ValueError(f"a result has category_id {r.get('category_id')!r}, not a ground-truth category "
                             f"({sorted(category_ids)[:6]}...): results must use the original COCO ids")


def coco_evaluate(results: Sequence[dict[str, Any]], coco_gt: Any,
                  iou_types: Iterable[str] = ("bbox", "segm")) -> dict[str, float]:
    """COCO AP in percent: ``{iou_type}_{AP, AP50, AP75, APs, APm, APl}`` for each IoU type.

    ``results`` are in COCO's result format (``image_id``, ORIGINAL ``category_id``, ``bbox`` [x, y, w, h],
    ``score``, and ``segmentation`` RLE for "segm"); ``coco_gt`` a pycocotools ``COCO`` or a JSON path. No
    result gives 0 (not pycocotools' crash); an area range without ground truth gives NaN (COCOeval's -1, as
    detectron2 reports it). Ground truth without annotations is a :class:`DatasetError`. pycocotools'
    printed summary is logged at INFO on the ``moco.transfer`` logger.
    """
    _require_pycocotools()
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    if isinstance(coco_gt, (str, Path)):
        with contextlib.redirect_stdout(io.StringIO()):
            coco_gt = COCO(str(coco_gt))
    if not coco_gt.getAnnIds():
        raise DatasetError(f"the ground truth has no annotation in {len(coco_gt.getImgIds())} images: "
                           f"nothing to evaluate against")
    check_results(results, coco_gt)
    metrics: dict[str, float] = {}
    for iou_type in iou_types:
        if iou_type not in ("bbox", "segm"):
            raise ValueError(f"iou_type must be 'bbox' or 'segm', got {iou_type!r}")
        chosen = [dict(r) for r in results]
        if iou_type == "segm":
            unmasked = sum("segmentation" not in a for a in coco_gt.dataset["annotations"])
            if unmasked:
                raise DatasetError(f"segm evaluation needs masks: {unmasked} ground-truth annotations have no "
                                   f"segmentation")
            if any("segmentation" not in r for r in chosen):
                raise ValueError("segm evaluation needs a 'segmentation' in every result")
            for r in chosen:
                # Without its bbox, loadRes takes the area from the mask: small/medium/large by mask area.
                r.pop("bbox", None)
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            coco_dt = coco_gt.loadRes(chosen) if chosen else empty_results(coco_gt)
            evaluator = COCOeval(coco_gt, coco_dt, iou_type)
            evaluator.evaluate()
            evaluator.accumulate()
            evaluator.summarize()
        logger.info("COCO %s evaluation:\n%s", iou_type, text.getvalue())
        for name, value in zip(COCO_METRICS, evaluator.stats[: len(COCO_METRICS)], strict=True):
            metrics[f"{iou_type}_{name}"] = float(value) * 100.0 if value >= 0 else math.nan
    return metrics


def score(task: str, found: list[Any], data: Any, *, masks: bool) -> dict[str, Any]:
    """The test split's metrics from an engine's predictions on ``data`` (a DetectionData): VOC
    ``(class_id, detection)`` pairs -> AP50, AP, AP75 and per-class AP50; COCO result dicts -> box (and mask) AP
    by pycocotools, by the LVIS API (``lvis``) or by cityscapesscripts; keypoint result dicts -> box AP and AP^kp
    (:func:`keypoint_evaluate`, below)."""
    if task == "keypoints":
        return {**keypoint_evaluate(found, data.coco_gt, data.oks_sigmas),
                **coco_evaluate(found, data.coco_gt, iou_types=("bbox",))}
    if task == "lvis":
        from transfer.detection.lvis import lvis_evaluate

        return lvis_evaluate(found, data.coco_gt)
    if task == "cityscapes":
        from transfer.detection.cityscapes import cityscapes_evaluate

        return cityscapes_evaluate(found, data)
    if task == "voc":
        detections: dict[int, list] = {k: [] for k in range(len(data.class_names))}
        for class_id, detection in found:
            detections[class_id].append(detection)
        return voc_evaluate(detections, data.test, data.class_names)
    return coco_evaluate(found, data.coco_gt, iou_types=("bbox", "segm") if masks else ("bbox",))


KEYPOINT_METRICS: tuple[str, ...] = ("AP", "AP50", "AP75", "APm", "APl")  # COCOeval.stats[0:5] for keypoints


def keypoint_evaluate(results: Sequence[dict[str, Any]], coco_gt: Any, sigmas: np.ndarray) -> dict[str, float]:
    """AP^kp in percent through ``COCOeval(gt, dt, "keypoints")`` with ``params.kpt_oks_sigmas = sigmas``:
    ``keypoints_{AP, AP50, AP75, APm, APl}`` (no small range: COCO does not score keypoints of small people).

    No result gives 0; a range without ground truth gives NaN (COCOeval's -1). The summary is logged at INFO.
    """
    from pycocotools.cocoeval import COCOeval

    if not any(a.get("num_keypoints", 0) > 0 and not a.get("iscrowd") for a in coco_gt.dataset["annotations"]):
        raise DatasetError(f"the ground truth has no labelled keypoint in {len(coco_gt.getImgIds())} images: "
                           f"nothing to evaluate against")
    check_results(results, coco_gt)
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        coco_dt = coco_gt.loadRes([dict(r) for r in results]) if results else empty_results(coco_gt)
        evaluator = COCOeval(coco_gt, coco_dt, "keypoints")
        evaluator.params.kpt_oks_sigmas = np.asarray(sigmas, dtype=np.float64)
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    logger.info("COCO keypoints evaluation:\n%s", text.getvalue())
    return {f"keypoints_{name}": float(value) * 100.0 if value >= 0 else math.nan
            for name, value in zip(KEYPOINT_METRICS, evaluator.stats[: len(KEYPOINT_METRICS)], strict=True)}
