"""Keypoints: the file reader's one-line errors, left/right flips, OKS sigmas, and AP^kp through pycocotools on a
toy case worked out by hand."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from moco_core.data.data import DatasetError
from transfer.detection.data import DetectionDataset
from transfer.detection.keypoints import (
    COCO_PERSON_KEYPOINTS,
    COCO_PERSON_SIGMAS,
    KeypointSet,
    keypoint_gt,
    keypoint_results,
    load_keypoints,
    oks_sigmas,
)
from transfer.detection.metrics import keypoint_evaluate

SIGMAS = np.array([0.1, 0.05])  # the toy set's two keypoints "a" and "b"


def _doc(width: int = 100, height: int = 100) -> dict:
    """Two images; image 1 holds two objects with keypoints, image 2 none (COCO file format)."""
    return {
        "images": [{"id": 1, "file_name": "1.jpg", "width": width, "height": height},
                   {"id": 2, "file_name": "2.jpg", "width": width, "height": height}],
        "categories": [{"id": 7, "name": "thing", "keypoints": ["a", "b"], "skeleton": [[1, 2]]}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 7, "bbox": [5, 5, 20, 20], "area": 100, "iscrowd": 0,
             "keypoints": [10, 10, 2, 20, 20, 2], "num_keypoints": 2},
            # b not labelled (v 0): it does not count in the OKS
            {"id": 2, "image_id": 1, "category_id": 7, "bbox": [40, 40, 30, 30], "area": 400, "iscrowd": 0,
             "keypoints": [50, 50, 2, 0, 0, 0], "num_keypoints": 1}]}


def _load(tmp_path: Path, doc: dict) -> tuple:
    path = tmp_path / "kp.json"
    path.write_text(json.dumps(doc))
    return load_keypoints(path, tmp_path, check_files=False)


def test_ap_kp_on_a_toy_case_worked_out_by_hand(tmp_path: Path) -> None:
    dicts, names, mapping, points = _load(tmp_path, _doc())
    gt = keypoint_gt(dicts, names, mapping, points)
    # OKS = mean over labelled keypoints of exp(-d^2 / (2 s^2 k^2)), s^2 = area, k = 2 sigma.
    # P1 on object 1 (area 100): a off by (1, 0): e = 1 / (2 * 100 * 0.2^2) = 1/8; b off by (0, 0.5):
    #   e = 0.25 / (2 * 100 * 0.1^2) = 1/8; OKS1 = exp(-1/8) = 0.8825 (passes 0.50-0.85, fails 0.90, 0.95).
    # P2 on object 2 (area 400): a off by (0, 4): e = 16 / (2 * 400 * 0.2^2) = 1/2; OKS2 = exp(-1/2) = 0.6065
    #   (passes 0.50-0.60), b far off but unlabelled.
    # P3 in image 2, which has no object: a false positive at every threshold, and the best score.
    results = [
        {"image_id": 1, "category_id": 7, "bbox": [5, 5, 20, 20], "score": 0.9, "keypoints": [11, 10, 1, 20, 20.5, 1]},
        {"image_id": 1, "category_id": 7, "bbox": [40, 40, 30, 30], "score": 0.8, "keypoints": [50, 54, 1, 0, 99, 1]},
        {"image_id": 2, "category_id": 7, "bbox": [0, 0, 9, 9], "score": 0.95, "keypoints": [3, 3, 1, 6, 6, 1]}]
    oks1 = math.exp(-1 / 8)
    oks2 = math.exp(-1 / 2)
    assert (round(oks1, 4), round(oks2, 4)) == (0.8825, 0.6065)
    # In score order P3 (FP), P1, P2. Both matched: precision 0, 1/2, 2/3 at recall 0, 1/2, 1: the envelope is
    # 2/3 at all 101 recall points, AP 2/3. P1 alone: envelope 1/2 up to recall 1/2 (51 points of 101), then 0.
    both, p1_alone = 2 / 3, 0.5 * 51 / 101
    thresholds = np.linspace(0.5, 0.95, 10)
    per_threshold = [both if t <= oks2 else p1_alone if t <= oks1 else 0.0 for t in thresholds]
    assert per_threshold == [both] * 3 + [p1_alone] * 5 + [0.0] * 2
    found = keypoint_evaluate(results, gt, SIGMAS)
    assert found["keypoints_AP"] == pytest.approx(100 * (3 * both + 5 * p1_alone) / 10)  # 32.62
    assert found["keypoints_AP50"] == pytest.approx(100 * both)
    assert found["keypoints_AP75"] == pytest.approx(100 * p1_alone)
    assert math.isnan(found["keypoints_APm"])  # both objects are COCO-small: no medium ground truth
    # the sigmas given are the ones used: a of 0.05 makes P1's e for a 1 / (2 * 100 * 0.1^2) = 1/2, OKS1
    # (exp(-1/2) + exp(-1/8)) / 2 = 0.744, P2's OKS exp(-2) = 0.135: AP (5 * 51/202) / 10 = 12.62
    tighter = keypoint_evaluate(results, gt, np.array([0.05, 0.05]))
    assert tighter["keypoints_AP"] == pytest.approx(100 * 5 * p1_alone / 10)


def test_no_prediction_scores_zero_and_results_use_original_ids(tmp_path: Path) -> None:
    dicts, names, mapping, points = _load(tmp_path, _doc())
    gt = keypoint_gt(dicts, names, mapping, points)
    assert keypoint_evaluate([], gt, SIGMAS)["keypoints_AP"] == 0.0
    with pytest.raises(ValueError, match="original COCO ids"):
        keypoint_evaluate([{"image_id": 1, "category_id": 0, "bbox": [0, 0, 1, 1], "score": 1.0,
                            "keypoints": [0] * 6}], gt, SIGMAS)


def test_results_take_the_half_pixel_off() -> None:
    """The model's keypoints are at pixel centres (+0.5, as detectron2 loads them); results are COCO's indices."""
    convert = keypoint_results([{"image_id": 42}], {0: 7})
    output = {"boxes": torch.tensor([[1.0, 2.0, 11.0, 22.0]]), "labels": torch.tensor([1]),
              "scores": torch.tensor([0.5]), "keypoints": torch.tensor([[[10.5, 20.5, 1.0], [3.5, 4.5, 1.0]]]),
              "keypoints_scores": torch.tensor([[0.25, 0.75]])}
    (result,) = convert(0, output)
    assert result == {"image_id": 42, "category_id": 7, "bbox": [1.0, 2.0, 10.0, 20.0], "score": 0.5,
                      "keypoints": [10.0, 20.0, 0.25, 3.0, 4.0, 0.75]}


def test_flip_exchanges_left_and_right() -> None:
    coco = KeypointSet(COCO_PERSON_KEYPOINTS)
    flip = coco.flip_indices
    assert flip[0] == 0  # the nose stays
    assert (flip[1], flip[2]) == (2, 1)  # left_eye <-> right_eye
    assert all(COCO_PERSON_KEYPOINTS[flip[k]] == n.replace("left", "X").replace("right", "left").replace("X", "right")
               for k, n in enumerate(COCO_PERSON_KEYPOINTS))
    assert len(coco.flip_pairs) == 8
    star = KeypointSet(("top", "left_upper", "left_lower", "right_lower", "right_upper"))
    assert star.flip_indices == (0, 4, 3, 2, 1)
    assert KeypointSet(("a", "Left", "Right")).flip_indices == (0, 2, 1)


def test_training_flip_moves_and_swaps_keypoints(tmp_path: Path) -> None:
    from PIL import Image

    Image.new("RGB", (100, 60)).save(tmp_path / "1.jpg")
    record = {"file_name": str(tmp_path / "1.jpg"), "image_id": 1, "height": 60, "width": 100, "annotations": [
        {"bbox": [5.0, 5.0, 30.0, 30.0], "category_id": 0, "iscrowd": 0,
         "keypoints": [10.0, 12.0, 2.0, 20.0, 22.0, 1.0], "num_keypoints": 2}]}
    plain = DetectionDataset([record], train=True, flip_prob=0.0, keypoint_flip=(1, 0))[0][1]
    flipped = DetectionDataset([record], train=True, flip_prob=1.0, keypoint_flip=(1, 0))[0][1]
    # pixel index 10 is the continuous 10.5; flipped in a 100-px image: 89.5, and the two keypoints swap
    assert plain["keypoints"].tolist() == [[[10.5, 12.5, 2.0], [20.5, 22.5, 1.0]]]
    assert flipped["keypoints"].tolist() == [[[79.5, 22.5, 1.0], [89.5, 12.5, 2.0]]]
    assert flipped["boxes"].tolist() == [[70.0, 5.0, 95.0, 30.0]]  # [x0, y0, x1, y1] = [5, 5, 30, 30] flipped


def test_oks_sigmas() -> None:
    coco = oks_sigmas(KeypointSet(COCO_PERSON_KEYPOINTS))
    assert coco.tolist() == list(COCO_PERSON_SIGMAS)
    assert coco[0] == pytest.approx(0.026) and coco[11] == pytest.approx(0.107)  # nose, left hip (pycocotools)
    own = oks_sigmas(KeypointSet(("a", "b", "c")))
    assert own.tolist() == pytest.approx([0.0669] * 3, abs=1e-4)
    assert oks_sigmas(KeypointSet(("a", "b")), (0.1, 0.2)).tolist() == [0.1, 0.2]
    with pytest.raises(DatasetError, match="2 sigmas for a set of 3 keypoints"):
        oks_sigmas(KeypointSet(("a", "b", "c")), (0.1, 0.2))


def test_reader_keeps_keypoints_and_area(tmp_path: Path) -> None:
    dicts, names, mapping, points = _load(tmp_path, _doc())
    assert names == ["thing"] and mapping == {0: 7}
    assert points == KeypointSet(("a", "b"), ((0, 1),))
    first = dicts[0]["annotations"][0]
    assert first["keypoints"] == [10.0, 10.0, 2.0, 20.0, 20.0, 2.0]
    assert (first["num_keypoints"], first["area"]) == (2, 100.0)


def _broken(change: str) -> dict:
    doc = _doc()
    cat, ann = doc["categories"][0], doc["annotations"][0]
    if change == "no keypoint names":
        del cat["keypoints"]
    elif change == "repeated names":
        cat["keypoints"] = ["a", "a"]
    elif change == "skeleton index":
        cat["skeleton"] = [[1, 3]]
    elif change == "other set":
        doc["categories"].append({"id": 8, "name": "other", "keypoints": ["c", "d"]})
    elif change == "length":
        ann["keypoints"] = [10, 10, 2]
    elif change == "visibility":
        ann["keypoints"] = [10, 10, 3, 20, 20, 2]
    elif change == "count":
        ann["num_keypoints"] = 1
    elif change == "not a number":
        ann["keypoints"] = [10, "x", 2, 20, 20, 2]
    elif change == "area":
        ann["area"] = -1
    return doc


@pytest.mark.parametrize(("change", "message"), [
    ("no keypoint names", "'keypoints' must be a non-empty list of keypoint names"),
    ("repeated names", "keypoint names repeat"),
    ("skeleton index", "'skeleton' must be pairs of 1-based keypoint indices in 1..2"),
    ("other set", "its keypoints differ from the first category's"),
    ("length", "'keypoints' must be 6 finite numbers"),
    ("visibility", "visibility must be 0, 1 or 2"),
    ("count", "num_keypoints is 1 but 2 keypoints have v > 0"),
    ("not a number", "'keypoints' must be 6 finite numbers"),
    ("area", "'area' must be a number >= 0"),
])
def test_bad_files_are_one_line_errors(tmp_path: Path, change: str, message: str) -> None:
    with pytest.raises(DatasetError, match=message) as err:
        _load(tmp_path, _broken(change))
    assert "\n" not in str(err.value)


def test_an_instances_file_is_named(tmp_path: Path) -> None:
    doc = copy.deepcopy(_doc())
    for cat in doc["categories"]:
        del cat["keypoints"]
    with pytest.raises(DatasetError, match="person_keypoints_"):
        _load(tmp_path, doc)
