"""mIoU and pixel accuracy against a confusion matrix worked out by hand, and against cityscapesScripts' official
pixel-level evaluator (skipped where the 'cityscapes' extra is not installed)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from moco_core.segmentation_metrics import confusion_matrix, scores
from transfer.segmentation.datasets import CITYSCAPES_CLASSES, CITYSCAPES_TRAIN_IDS

# A 2x4 image, one pixel ignored (255). Pairs (ground truth, prediction) of the other 7:
# (0,0) (0,1) (1,1) (1,1) / (2,2) (2,0) (1,0)
LABELS = torch.tensor([[0, 0, 1, 1], [2, 2, 255, 1]])
PREDICTIONS = torch.tensor([[0, 1, 1, 1], [2, 0, 2, 0]])


def test_confusion_matrix_by_hand() -> None:
    matrix = confusion_matrix(LABELS, PREDICTIONS, 3)
    # rows: ground truth 0, 1, 2; columns: prediction 0, 1, 2
    assert matrix.tolist() == [[1, 1, 0], [1, 2, 0], [1, 0, 1]]


def test_scores_by_hand() -> None:
    result = scores(confusion_matrix(LABELS, PREDICTIONS, 3), ("a", "b", "c"))
    # IoU = TP / (gt + predicted - TP): a 1/(2+3-1) = 1/4, b 2/(3+3-2) = 1/2, c 1/(2+1-1) = 1/2
    assert result["per_class_IoU"] == pytest.approx({"a": 25.0, "b": 50.0, "c": 50.0})
    assert result["mIoU"] == pytest.approx(100 * (1 / 4 + 1 / 2 + 1 / 2) / 3)  # 41.67
    assert result["pixel_acc"] == pytest.approx(100 * 4 / 7)  # the 255 pixel is not counted
    assert result["mean_acc"] == pytest.approx(100 * (1 / 2 + 2 / 3 + 1 / 2) / 3)


def test_absent_class_is_left_out_and_a_false_class_scores_zero() -> None:
    # class 3 is neither labelled nor predicted: no IoU; predicting class 3 where it is not scores IoU 0
    matrix = confusion_matrix(LABELS, PREDICTIONS, 4)
    assert scores(matrix, "abcd")["per_class_IoU"]["d"] is None
    assert scores(matrix, "abcd")["mIoU"] == pytest.approx(100 * (1 / 4 + 1 / 2 + 1 / 2) / 3)
    wrong = PREDICTIONS.clone()
    wrong[0, 0] = 3  # the only correct pixel of class 0 becomes a false class-3 one
    result = scores(confusion_matrix(LABELS, wrong, 4), "abcd")
    assert result["per_class_IoU"]["a"] == 0.0 and result["per_class_IoU"]["d"] == 0.0
    assert result["mIoU"] == pytest.approx(100 * (0 + 1 / 2 + 1 / 2 + 0) / 4)


def test_against_an_independent_loop() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 6, (40, 50))
    labels[rng.random((40, 50)) < 0.1] = 255
    predictions = rng.integers(0, 5, (40, 50))
    ious = []
    for c in range(5):
        valid = (labels != 255) & (labels != 5)  # 5: a value outside the 5 classes
        tp = np.sum((labels == c) & (predictions == c) & valid)
        fp = np.sum((labels != c) & (predictions == c) & valid)
        fn = np.sum((labels == c) & (predictions != c) & valid)
        if tp + fp + fn:
            ious.append(tp / (tp + fp + fn))
    result = scores(confusion_matrix(torch.from_numpy(labels), torch.from_numpy(predictions), 5), "abcde")
    assert result["mIoU"] == pytest.approx(100 * np.mean(ious))


def test_empty_matrix_is_nan() -> None:
    result = scores(np.zeros((2, 2)), ("a", "b"))
    assert math.isnan(result["mIoU"]) and math.isnan(result["pixel_acc"])


def test_train_id_table_is_cityscapes_scripts() -> None:
    labels = pytest.importorskip("cityscapesscripts.helpers.labels")
    official = {label.id: label.trainId for label in labels.labels if label.id >= 0}
    assert {i: t for i, t in enumerate(CITYSCAPES_TRAIN_IDS)} == {i: 255 if t in (-1, 255) else t
                                                                  for i, t in official.items()}
    names = {label.trainId: label.name for label in labels.labels if 0 <= label.trainId < 255}
    assert tuple(names[t] for t in range(19)) == CITYSCAPES_CLASSES


def test_miou_equals_cityscapes_scripts(tmp_path: Path) -> None:
    """Our mIoU of train-id maps equals the official evaluator's on the same images in label ids."""
    evaluator = pytest.importorskip("cityscapesscripts.evaluation.evalPixelLevelSemanticLabeling")
    labels = pytest.importorskip("cityscapesscripts.helpers.labels")
    train_to_id = {label.trainId: label.id for label in labels.labels if not label.ignoreInEval}
    rng = np.random.default_rng(1)
    matrix = torch.zeros(19, 19, dtype=torch.int64)
    gt_files, prediction_files = [], []
    for n in range(3):
        gt = rng.choice([0, 4, 7, 8, 11, 17, 21, 23, 24, 26, 33], size=(30, 40)).astype(np.uint8)  # label ids
        predicted = rng.choice([0, 1, 2, 5, 8, 10, 11, 13, 18], size=(30, 40))  # train ids
        predicted[gt == 26] = 13  # some agreement: every car pixel right
        gt_files.append(str(tmp_path / f"gt{n}_gtFine_labelIds.png"))
        prediction_files.append(str(tmp_path / f"pred{n}.png"))
        Image.fromarray(gt).save(gt_files[-1])
        Image.fromarray(np.vectorize(train_to_id.get)(predicted).astype(np.uint8)).save(prediction_files[-1])
        mapped = np.asarray(CITYSCAPES_TRAIN_IDS, dtype=np.int64)[gt]
        matrix += confusion_matrix(torch.from_numpy(mapped), torch.from_numpy(predicted), 19)
    args = evaluator.args
    args.evalInstLevelScore, args.JSONOutput, args.quiet, args.evalPixelAccuracy = False, False, True, False
    official = evaluator.evaluateImgLists(prediction_files, gt_files, args)
    ours = scores(matrix, CITYSCAPES_CLASSES)
    assert ours["mIoU"] / 100 == pytest.approx(official["averageScoreClasses"])
    for name, value in ours["per_class_IoU"].items():
        expected = official["classScores"][name]
        assert (value is None and math.isnan(expected)) or value / 100 == pytest.approx(expected)
