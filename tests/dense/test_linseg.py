"""dense/linseg.py's val scoring against a hand-worked case: patch scores upsampled bilinearly (not by nearest
neighbour) to the label's full resolution, ADE20K's 0 left out, the confusion matrix and its scores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dense.data import Split
from dense.linseg import score_val
from moco_core.data.pairs import Sample
from moco_core.frozen.features import FeatureSet


def test_val_scores_are_upsampled_bilinearly_and_scored_by_hand(tmp_path: Path) -> None:
    label = tmp_path / "ADE_val_00000001.png"  # ADE20K values: class + 1, 0 ignored (bottom-right pixel)
    Image.fromarray(np.array([[1, 1, 2, 2], [1, 1, 2, 2], [2, 2, 2, 2], [2, 2, 2, 0]], dtype=np.uint8)).save(label)
    split = Split(tmp_path, "val", [Sample(tmp_path / "ADE_val_00000001.jpg", label)])
    # a 2 x 2 grid: the top-left patch scores class 0 strongly (10), the other three class 1 weakly (1)
    patches = torch.tensor([[10.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
    val = FeatureSet({"patch": patches}, torch.tensor([[0, 0]] * 4))
    found = score_val(lambda x: x, val, split, "patch", ("a", "b"), torch.device("cpu"))
    # Bilinear at 4 x 4 (half-pixel centres): the top-left patch's 10 still wins one pixel beyond its quarter, at
    # (0, 2), (1, 2), (2, 0), (2, 1) (weight 0.25 x 10 or 0.1875 x 10 against 0.75 or 0.8125); nearest would not.
    # Predicted [[0,0,0,1],[0,0,0,1],[0,0,1,1],[1,1,1,1]]; ground truth 0 on the top-left 4 pixels, 1 on the other
    # 11 counted: matrix [[4, 0], [4, 7]]; IoU a 4 / 8, b 7 / 11; pixel accuracy 11 / 15.
    assert found["per_class_IoU"] == pytest.approx({"a": 50.0, "b": 700 / 11})
    assert found["mIoU"] == pytest.approx((50.0 + 700 / 11) / 2)
    assert found["pixel_acc"] == pytest.approx(100 * 11 / 15)
