"""VOC and COCO metrics against values worked out by hand and an independent devkit-style reference."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from moco_core.data.data import DatasetError
from transfer.detection.metrics import coco_evaluate, dicts_to_coco, voc_evaluate


def image(image_id: Any, annotations: list[tuple], size: int = 100) -> dict[str, Any]:
    """A dataset dict; annotations are (category_id, [x0, y0, x1, y1]) or (..., difficult)."""
    return {"file_name": f"/x/{image_id}.jpg", "image_id": image_id, "height": size, "width": size,
            "annotations": [{"bbox": [float(v) for v in a[1]], "category_id": a[0], "iscrowd": 0,
                             "difficult": bool(a[2]) if len(a) > 2 else False} for a in annotations]}


# ---------------------------------------------------------------- VOC

def test_perfect_detections_score_100() -> None:
    dicts = [image("1", [(0, [0, 0, 10, 10]), (1, [20, 30, 60, 90])]), image("2", [(0, [5, 5, 50, 50])])]
    dets = {0: [("1", 0.9, 0, 0, 10, 10), ("2", 0.8, 5, 5, 50, 50)], 1: [("1", 0.7, 20, 30, 60, 90)]}
    result = voc_evaluate(dets, dicts, ["a", "b"])
    assert result["AP50"] == pytest.approx(100) and result["AP"] == pytest.approx(100)
    assert result["AP75"] == pytest.approx(100)
    assert result["per_class_AP50"] == pytest.approx({"a": 100, "b": 100})


def test_hits_misses_duplicates_and_a_difficult_box_by_hand() -> None:
    dicts = [image("1", [(0, [0, 0, 10, 10]), (0, [20, 20, 30, 30], True)]),
             image("2", [(0, [0, 0, 10, 10]), (1, [30, 30, 40, 40])]),
             image("3", [(0, [50, 50, 60, 60])])]
    dets = {
        0: [("1", 0.9, 0, 0, 10, 10),  # TP
            ("1", 0.8, 0, 0, 10, 10),  # duplicate of the same box: FP
            ("1", 0.7, 20, 20, 30, 30),  # the difficult box: neither TP nor FP
            ("2", 0.6, 0, 0, 10, 10),  # TP
            ("3", 0.5, 0, 0, 5, 5)],  # no overlap: FP
        1: [("2", 0.9, 30, 30, 40, 38)],  # IoU 80/100 = 0.8 with the class-1 box
    }
    # Class 0: 3 non-difficult boxes. Cumulative (tp, fp) in score order: (1,0) (1,1) (1,1) (2,1) (2,2), so
    # recall 1/3 1/3 1/3 2/3 2/3 and precision 1 1/2 1/2 2/3 1/2. 11-point AP: t = 0, 0.1, 0.2, 0.3 reach
    # recall 1/3 -> max precision 1; t = 0.4, 0.5, 0.6 only recall 2/3 -> 2/3; t = 0.7..1.0 -> 0.
    # AP = (4 * 1 + 3 * 2/3) / 11 = 6/11, at every IoU threshold (every match has IoU 1).
    # Class 1: IoU 0.8 is > 0.50, ..., 0.75 (TP, AP 1) and not > 0.80, ..., 0.95 (FP, AP 0).
    result = voc_evaluate(dets, dicts, ["a", "b"])
    assert result["per_class_AP50"]["a"] == pytest.approx(100 * 6 / 11)
    assert result["per_class_AP50"]["b"] == pytest.approx(100)
    assert result["AP50"] == pytest.approx(100 * (6 / 11 + 1) / 2)
    assert result["AP75"] == pytest.approx(100 * (6 / 11 + 1) / 2)
    # 6 thresholds at (6/11 + 1)/2 and 4 at (6/11 + 0)/2: mean = 3/11 + 6/10 * 1/2 = 63/110
    assert result["AP"] == pytest.approx(100 * 63 / 110)


@pytest.mark.parametrize(("height", "iou_key", "hit"), [
    (5.0, "AP50", False), (5.01, "AP50", True),  # IoU 0.5 exactly is not > 0.5
    (7.5, "AP75", False), (7.51, "AP75", True),
])
def test_iou_just_below_and_above_the_threshold(height: float, iou_key: str, hit: bool) -> None:
    dicts = [image("1", [(0, [0, 0, 10, 10])])]
    result = voc_evaluate({0: [("1", 0.5, 0, 0, 10, height)]}, dicts, ["a"])  # IoU = height / 10
    assert result[iou_key] == pytest.approx(100.0 if hit else 0.0)


def test_class_without_ground_truth_counts_as_zero_and_no_ground_truth_at_all_is_an_error() -> None:
    dicts = [image("1", [(0, [0, 0, 10, 10]), (1, [20, 20, 30, 30], True)])]
    dets = {0: [("1", 0.5, 0, 0, 10, 10)], 1: [("1", 0.5, 20, 20, 30, 30), ("1", 0.4, 60, 60, 70, 70)]}
    result = voc_evaluate(dets, dicts, ["a", "b", "c"])
    assert result["per_class_AP50"] == pytest.approx({"a": 100, "b": 0, "c": 0})  # b: difficult only; c: none
    assert result["AP50"] == pytest.approx(100 / 3)
    with pytest.raises(DatasetError, match="no ground-truth object"):
        voc_evaluate(dets, [image("1", [(1, [20, 20, 30, 30], True)])], ["a", "b"])


def test_bad_detection_keys_are_rejected() -> None:
    dicts = [image("1", [(0, [0, 0, 10, 10])])]
    with pytest.raises(ValueError, match="category ids must be 0..0"):
        voc_evaluate({1: []}, dicts, ["a"])
    with pytest.raises(ValueError, match="is for image '9', which is not in the dataset dicts"):
        voc_evaluate({0: [("9", 0.5, 0, 0, 1, 1)]}, dicts, ["a"])


def reference_voc(dets: dict, dicts: list, num_classes: int, use_07: bool) -> dict[float, list[float]]:
    """Straightforward VOC-devkit loops on our 0-based coordinates (continuous IoU, no +1 shifting)."""
    aps: dict[float, list[float]] = {}
    for t in [0.5 + 0.05 * i for i in range(10)]:
        aps[round(t, 2)] = []
        for c in range(num_classes):
            gts = {d["image_id"]: [(a["bbox"], a["difficult"]) for a in d["annotations"] if a["category_id"] == c]
                   for d in dicts}
            npos = sum(1 for boxes in gts.values() for _, diff in boxes if not diff)
            used = {k: [False] * len(v) for k, v in gts.items()}
            tp, fp = [], []
            for img, _, *box in sorted(dets.get(c, []), key=lambda d: -d[1]):
                best, best_j = -1.0, -1
                for j, (g, _) in enumerate(gts[img]):
                    iw = max(0.0, min(box[2], g[2]) - max(box[0], g[0]))
                    ih = max(0.0, min(box[3], g[3]) - max(box[1], g[1]))
                    inter = iw * ih
                    iou = inter / ((box[2] - box[0]) * (box[3] - box[1]) + (g[2] - g[0]) * (g[3] - g[1]) - inter)
                    if iou > best:
                        best, best_j = iou, j
                if best > t and gts[img][best_j][1]:
                    tp.append(0)
                    fp.append(0)
                elif best > t and not used[img][best_j]:
                    used[img][best_j] = True
                    tp.append(1)
                    fp.append(0)
                else:
                    tp.append(0)
                    fp.append(1)
            if npos == 0:
                aps[round(t, 2)].append(0.0)
                continue
            rec, prec, ctp, cfp = [], [], 0, 0
            for a, b in zip(tp, fp, strict=True):
                ctp, cfp = ctp + a, cfp + b
                rec.append(ctp / npos)
                prec.append(ctp / (ctp + cfp) if ctp + cfp else 0.0)
            if use_07:
                # The devkit's recall points are numpy's arange(0, 1.1, 0.1) values (0.30000000000000004, ...).
                points = np.arange(0.0, 1.1, 0.1)
                aps[round(t, 2)].append(sum(max([p for r, p in zip(rec, prec, strict=True) if r >= x],
                                                default=0.0) for x in points) / 11)
            else:
                area, last_r = 0.0, 0.0
                for i, r in enumerate(rec):
                    if r > last_r:
                        area += (r - last_r) * max(prec[i:])
                        last_r = r
                aps[round(t, 2)].append(area)
    return aps


def random_case(rng: np.random.Generator, num_classes: int) -> tuple[dict, list]:
    dicts, dets = [], {c: [] for c in range(num_classes)}
    for i in range(int(rng.integers(1, 6))):
        annotations = []
        for _ in range(int(rng.integers(0, 5))):
            x0, y0 = rng.uniform(0, 80, 2)
            box = [x0, y0, x0 + rng.uniform(2, 20), y0 + rng.uniform(2, 20)]
            c = int(rng.integers(num_classes))
            annotations.append((c, box, rng.random() < 0.2))
            for _ in range(int(rng.integers(0, 3))):  # jittered detections of it, duplicates included
                jitter = rng.normal(0, 2.0, 4)
                det = [box[0] + jitter[0], box[1] + jitter[1], box[2] + abs(jitter[2]) + 0.5,
                       box[3] + abs(jitter[3]) + 0.5]
                dets[c].append((str(i), float(rng.random()), *det))
        for _ in range(int(rng.integers(0, 3))):  # false alarms
            x0, y0 = rng.uniform(0, 80, 2)
            dets[int(rng.integers(num_classes))].append((str(i), float(rng.random()), x0, y0, x0 + 10, y0 + 10))
        dicts.append(image(str(i), annotations))
    return dets, dicts


@pytest.mark.parametrize("use_07", [True, False])
def test_agrees_with_a_reference_on_random_cases(use_07: bool) -> None:
    rng = np.random.default_rng(7 + use_07)
    checked = 0
    for _ in range(60):
        dets, dicts = random_case(rng, 3)
        if not any(not a["difficult"] for d in dicts for a in d["annotations"]):
            continue
        result = voc_evaluate(dets, dicts, ["a", "b", "c"], use_07_metric=use_07)
        ref = reference_voc(dets, dicts, 3, use_07)
        class_means = {t: 100 * float(np.mean(v)) for t, v in ref.items()}
        assert result["AP50"] == pytest.approx(class_means[0.5], abs=1e-9)
        assert result["AP75"] == pytest.approx(class_means[0.75], abs=1e-9)
        assert result["AP"] == pytest.approx(float(np.mean(list(class_means.values()))), abs=1e-9)
        assert list(result["per_class_AP50"].values()) == pytest.approx([100 * v for v in ref[0.5]], abs=1e-9)
        checked += 1
    assert checked >= 40


# ---------------------------------------------------------------- COCO

def coco_dicts(segm: bool = False) -> list[dict[str, Any]]:
    """One 100x100 image with a 40x40 box (area 1600: 'medium') of contiguous class 0 (COCO id 3)."""
    d = image(1, [(0, [10, 10, 50, 50])])
    if segm:
        d["annotations"][0]["segmentation"] = [[10.0, 10.0, 50.0, 10.0, 50.0, 50.0, 10.0, 50.0]]
    return [d]


@pytest.fixture
def mask_util() -> Any:
    """pycocotools.mask; the COCO tests are skipped where pycocotools (the ``transfer`` extra) is missing."""
    return pytest.importorskip("pycocotools.mask")


def rectangle_rle(mask_util: Any, x0: int, y0: int, x1: int, y1: int, size: int = 100) -> dict[str, Any]:
    mask = np.zeros((size, size), np.uint8, order="F")
    mask[y0:y1, x0:x1] = 1
    rle = mask_util.encode(mask)
    return {"size": rle["size"], "counts": rle["counts"].decode("ascii")}


def test_coco_perfect_detection_scores_100_for_boxes_and_masks(mask_util: Any) -> None:
    gt = dicts_to_coco(coco_dicts(segm=True), ["thing", "other"], {0: 3, 1: 8})
    assert gt.getCatIds() == [3, 8] and gt.anns[1]["area"] == pytest.approx(1600)  # polygon area, id from 1
    result = [{"image_id": 1, "category_id": 3, "bbox": [10, 10, 40, 40], "score": 0.9,
               "segmentation": rectangle_rle(mask_util, 10, 10, 50, 50)}]
    metrics = coco_evaluate(result, gt)
    for key in ("bbox_AP", "bbox_AP50", "bbox_AP75", "bbox_APm", "segm_AP", "segm_AP50", "segm_AP75", "segm_APm"):
        assert metrics[key] == pytest.approx(100), key
    for key in ("bbox_APs", "bbox_APl", "segm_APs", "segm_APl"):  # no ground truth of that size: NaN
        assert math.isnan(metrics[key]), key


def test_coco_one_box_at_a_known_iou(mask_util: Any) -> None:
    # A 40 x 24.8 box inside the 40 x 40 one: IoU 0.62. It matches at IoU thresholds 0.50, 0.55, 0.60 (one
    # detection, one GT: precision 1 at every one of the 101 recall points, AP 1) and at none of 0.65..0.95
    # (no true positive: AP 0). So AP50 = 100, AP75 = 0, AP = 100 * 3/10.
    gt = dicts_to_coco(coco_dicts(), ["thing"], {0: 3})
    metrics = coco_evaluate([{"image_id": 1, "category_id": 3, "bbox": [10, 10, 40, 24.8], "score": 0.3}], gt,
                            iou_types=("bbox",))
    assert set(metrics) == {f"bbox_{k}" for k in ("AP", "AP50", "AP75", "APs", "APm", "APl")}
    assert metrics["bbox_AP50"] == pytest.approx(100) and metrics["bbox_AP75"] == pytest.approx(0)
    assert metrics["bbox_AP"] == pytest.approx(30) and metrics["bbox_APm"] == pytest.approx(30)


def test_coco_mask_at_a_known_iou_with_a_polygon_ground_truth(mask_util: Any) -> None:
    # GT polygon: the 40x40 square (1600 pixels). Result mask: 40 columns x 25 rows inside it: IoU 1000/1600
    # = 0.625 > 0.60 and < 0.65, so segm AP = 30 as above; its box, the exact square, scores 100.
    gt = dicts_to_coco(coco_dicts(segm=True), ["thing"], {0: 3})
    result = [{"image_id": 1, "category_id": 3, "bbox": [10, 10, 40, 40], "score": 0.3,
               "segmentation": rectangle_rle(mask_util, 10, 10, 50, 35)}]
    metrics = coco_evaluate(result, gt)
    assert metrics["segm_AP50"] == pytest.approx(100) and metrics["segm_AP75"] == pytest.approx(0)
    assert metrics["segm_AP"] == pytest.approx(30)
    assert metrics["bbox_AP"] == pytest.approx(100)


def test_coco_no_results_give_zeros_and_no_ground_truth_is_an_error(tmp_path: Path, mask_util: Any) -> None:
    sizes = image(1, [(0, [0, 0, 10, 10]), (0, [20, 20, 70, 70]), (0, [0, 0, 100, 100])])  # small, medium, large
    for ann in sizes["annotations"]:
        x0, y0, x1, y1 = ann["bbox"]
        ann["segmentation"] = [[x0, y0, x1, y0, x1, y1, x0, y1]]
    gt = dicts_to_coco([sizes], ["thing"])
    metrics = coco_evaluate([], gt)
    assert len(metrics) == 12 and all(v == 0.0 for v in metrics.values())
    with pytest.raises(DatasetError, match="segm evaluation needs masks: 1 ground-truth annotations have no"):
        coco_evaluate([], dicts_to_coco(coco_dicts(), ["thing"]))
    with pytest.raises(DatasetError, match="no annotation in 1 images"):
        coco_evaluate([], dicts_to_coco([image(1, [])], ["thing"]))


def test_coco_ground_truth_from_a_json_path_and_result_checks(tmp_path: Path, mask_util: Any) -> None:
    doc = {"images": [{"id": 5, "file_name": "a.jpg", "width": 100, "height": 100}],
           "categories": [{"id": 11, "name": "thing"}],
           "annotations": [{"id": 1, "image_id": 5, "category_id": 11, "bbox": [10, 10, 40, 40], "area": 1600,
                            "iscrowd": 0, "segmentation": [[10, 10, 50, 10, 50, 50, 10, 50]]}]}
    path = tmp_path / "gt.json"
    path.write_text(json.dumps(doc))
    metrics = coco_evaluate([{"image_id": 5, "category_id": 11, "bbox": [10, 10, 40, 40], "score": 1.0}], path,
                            iou_types=["bbox"])
    assert metrics["bbox_AP"] == pytest.approx(100)
    with pytest.raises(ValueError, match="category_id 0, not a ground-truth category .* original COCO ids"):
        coco_evaluate([{"image_id": 5, "category_id": 0, "bbox": [1, 1, 2, 2], "score": 1.0}], path)
    with pytest.raises(ValueError, match="image_id 6, which the ground truth lacks"):
        coco_evaluate([{"image_id": 6, "category_id": 11, "bbox": [1, 1, 2, 2], "score": 1.0}], path)
    with pytest.raises(ValueError, match="needs a 'segmentation' in every result"):
        coco_evaluate([{"image_id": 5, "category_id": 11, "bbox": [1, 1, 2, 2], "score": 1.0}], path)
