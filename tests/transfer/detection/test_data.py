"""Detection samples for torchvision's detectors: targets, masks and flips (transfer/detection/data.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from transfer.detection.data import DetectionDataset


def test_training_targets_drop_crowd_keep_difficult_and_flip(tmp_path: Path) -> None:
    path = tmp_path / "a.png"
    pixels = np.zeros((10, 20, 3), dtype=np.uint8)
    pixels[:, :5] = 255  # white left strip
    Image.fromarray(pixels).save(path)
    square = [2.0, 1.0, 6.0, 1.0, 6.0, 5.0, 2.0, 5.0]
    record = {"file_name": str(path), "image_id": 7, "height": 10, "width": 20, "annotations": [
        {"bbox": [2.0, 1.0, 6.0, 5.0], "category_id": 0, "iscrowd": 0, "difficult": False, "segmentation": [square]},
        {"bbox": [0.0, 0.0, 4.0, 4.0], "category_id": 1, "iscrowd": 1, "difficult": False, "segmentation": [square]},
        {"bbox": [1.0, 1.0, 3.0, 3.0], "category_id": 2, "iscrowd": 0, "difficult": True, "segmentation": [square]},
    ]}
    image, target, index = DetectionDataset([record], train=True, masks=True)[0]
    assert image.shape == (3, 10, 20) and image[0, 0, 0] == 1.0 and image[0, 0, 10] == 0.0
    assert target["labels"].tolist() == [1, 3]  # category + 1: torchvision's 0 is the background
    assert target["boxes"].tolist() == [[2.0, 1.0, 6.0, 5.0], [1.0, 1.0, 3.0, 3.0]]  # difficult kept (detectron2)
    assert target["masks"].shape == (2, 10, 20) and target["masks"][0, 2:5, 2:6].all()
    assert target["masks"][0].sum() == 16 and index == 0
    image, target, _ = DetectionDataset([record], train=True, flip_prob=1.0, masks=True)[0]
    assert image[0, 0, 19] == 1.0  # the white strip moved right
    assert target["boxes"].tolist() == [[14.0, 1.0, 18.0, 5.0], [17.0, 1.0, 19.0, 3.0]]  # x -> width - x
    assert target["masks"][0, 2:5, 14:18].all() and target["masks"][0].sum() == 16
    _, empty, _ = DetectionDataset([record], train=False)[0]
    assert empty == {}
