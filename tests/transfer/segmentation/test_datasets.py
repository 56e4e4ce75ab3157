"""The segmentation readers on the real layouts' fixtures, the training augmentation, and the embedded masks."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from moco_core.config import ConfigError
from moco_core.data import shapes
from moco_core.data.data import DatasetError
from tests.transfer.segmentation.layouts import (
    CITYSCAPES,
    VOC_TRAIN_AUG,
    VOC_VAL,
    cityscapes_layout,
    custom_segmentation_layout,
    voc_segmentation_layout,
)
from transfer.embedded import scenes
from transfer.segmentation.datasets import (
    CITYSCAPES_CLASSES,
    VOC_CLASSES,
    SegmentationDataset,
    load_data,
    read_label,
)
from transfer.segmentation.embedded import class_mask, ensure_semseg


def test_voc_train_aug_and_val(tmp_path: Path) -> None:
    root = voc_segmentation_layout(tmp_path)
    data = load_data(str(root), "voc_2012_sem_seg_train_aug", "voc_2012_sem_seg_val")
    assert [s.image.stem for s in data.train] == list(VOC_TRAIN_AUG) and len(data.test) == len(VOC_VAL)
    assert data.class_names == VOC_CLASSES and len(VOC_CLASSES) == 21 and data.label_map is None
    assert all(s.label.parent.name == "SegmentationClassAug" for s in data.train)
    # the official palette PNG and the grey PNG hold the same class indices
    aug = read_label(data.test[0].label)
    assert torch.equal(aug, read_label(root / "VOC2012" / "SegmentationClass" / f"{VOC_VAL[0]}.png"))
    assert set(aug.unique().tolist()) - set(range(21)) == {255}


def test_voc_deeplab_list_and_official_labels(tmp_path: Path) -> None:
    root = voc_segmentation_layout(tmp_path)
    devkit = root / "VOC2012"
    shutil.rmtree(devkit / "SegmentationClassAug")  # the official labels only: train and val, no SBD image
    (devkit / "ImageSets" / "Segmentation" / "pairs.txt").write_text(
        "/JPEGImages/2007_000032.jpg /SegmentationClass/2007_000032.png\n")
    data = load_data(str(root), "voc_2012_sem_seg_pairs", "voc_2012_sem_seg_val")
    assert data.train[0].label == devkit / "SegmentationClass" / "2007_000032.png"
    with pytest.raises(DatasetError, match="2008_000002.png is missing"):
        load_data(str(root), "voc_2012_sem_seg_train_aug", "voc_2012_sem_seg_val")


def test_cityscapes_train_ids_and_label_ids(tmp_path: Path) -> None:
    with_train_ids = load_data(str(cityscapes_layout(tmp_path / "a")), "cityscapes_fine_sem_seg_train",
                               "cityscapes_fine_sem_seg_val")
    assert [s.image.name for s in with_train_ids.train] == [f"{s}_leftImg8bit.png" for s in CITYSCAPES["train"]]
    assert with_train_ids.train[0].label.name.endswith("_gtFine_labelTrainIds.png")
    assert with_train_ids.label_map is None and with_train_ids.class_names == CITYSCAPES_CLASSES
    only_ids = load_data(str(cityscapes_layout(tmp_path / "b", train_ids=False)), "cityscapes_fine_sem_seg_train",
                         "cityscapes_fine_sem_seg_val")
    assert only_ids.train[0].label.name.endswith("_gtFine_labelIds.png")
    # mapped through the official table, the label ids give the train-id PNGs createTrainIdLabelImgs writes
    for a, b in zip(with_train_ids.test + with_train_ids.train, only_ids.test + only_ids.train, strict=True):
        assert torch.equal(read_label(a.label), read_label(b.label, only_ids.label_map))
    mapped = read_label(only_ids.test[0].label, only_ids.label_map)
    assert set(mapped.unique().tolist()) <= {*range(19), 255}
    ids = read_label(only_ids.test[0].label)
    assert (mapped[ids == 26] == 13).all() and (mapped[ids == 4] == 255).all()  # car -> 13; static: ignored


def test_custom_folders_need_class_names(tmp_path: Path) -> None:
    root = custom_segmentation_layout(tmp_path)
    data = load_data(str(root), "images/train:labels/train", "images/val:labels/val", ("bg", "a", "b"))
    assert len(data.train) == 4 and data.name == "custom: images/train:labels/train"
    with pytest.raises(ConfigError, match="needs the class names"):
        load_data(str(root), "images/train:labels/train", "images/val:labels/val")
    with pytest.raises(ConfigError, match="names its own classes"):
        load_data(str(voc_segmentation_layout(tmp_path)), "voc_2012_sem_seg_train_aug", "voc_2012_sem_seg_val",
                  ("a",))


@pytest.mark.parametrize(("train", "message"), [
    ("voc_2012_sem_seg_nope", "no such split list"),
    ("coco_2017_train", "is none of"),
    ("images/train:labels/none", "img_000.png is missing"),
])
def test_one_line_errors(tmp_path: Path, train: str, message: str) -> None:
    root = custom_segmentation_layout(voc_segmentation_layout(tmp_path))
    test = "images/val:labels/val" if ":" in train else "voc_2012_sem_seg_val"
    with pytest.raises((DatasetError, ConfigError), match=message):
        load_data(str(root), train, test, ("a", "b", "c") if ":" in train else ())


def test_a_label_outside_the_classes_is_one_line(tmp_path: Path) -> None:
    root = custom_segmentation_layout(tmp_path, classes=3)  # values 0, 1, 2 and 255
    data = load_data(str(root), "images/train:labels/train", "images/val:labels/val", ("bg", "a"))
    SegmentationDataset(data.train, train=False, num_classes=3)[0]
    with pytest.raises(DatasetError, match="label value 2 is neither a class \\(0-1\\) nor the ignore index 255"):
        SegmentationDataset(data.train, train=False, num_classes=2)[0]


def test_an_rgb_label_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.png"
    Image.fromarray(np.zeros((4, 4, 3), dtype=np.uint8)).save(path)
    with pytest.raises(DatasetError, match="RGB image, not a label map"):
        read_label(path)


def test_augmentation_pads_with_ignore_and_crops(tmp_path: Path) -> None:
    data = load_data(str(voc_segmentation_layout(tmp_path)), "voc_2012_sem_seg_train_aug", "voc_2012_sem_seg_val")
    torch.manual_seed(0)
    small = SegmentationDataset(data.train, train=True, crop_size=96, scale_range=(1.0, 1.0), flip_prob=0.0)
    image, target, index = small[0]
    label = read_label(data.train[0].label)  # 40x56: padded to 96 at the bottom and right
    assert image.shape == (3, 96, 96) and target["mask"].shape == (96, 96) and index == 0
    assert torch.equal(target["mask"][:40, :56], label) and (target["mask"][40:] == 255).all()
    assert torch.allclose(image[:, 50, 80], torch.tensor([0.485, 0.456, 0.406]))  # the mean colour
    flipped = SegmentationDataset(data.train, train=True, crop_size=16, scale_range=(2.0, 2.0), flip_prob=1.0)
    image, target, _ = flipped[1]
    assert image.shape == (3, 16, 16) and target["mask"].dtype == torch.int64
    whole = SegmentationDataset(data.test, train=False)[0]
    assert whole[0].shape[1:] == whole[1]["mask"].shape == (56, 56)  # the 6th image: 40 + 4 * 4 rows


def test_embedded_masks_are_the_scenes_objects(tmp_path: Path) -> None:
    root = ensure_semseg(tmp_path, train=3, val=2, size=64)
    data = load_data(str(root), "voc_2012_sem_seg_train_aug", "voc_2012_sem_seg_val")
    assert len(data.train) == 3 and len(data.test) == 2
    for sample, (_, objects) in zip(data.train, scenes("train", 3, size=64), strict=True):
        label = read_label(sample.label)
        assert torch.equal(label, torch.from_numpy(class_mask(objects, 64).astype(np.int64)))
        for obj in objects:
            assert (label[torch.from_numpy(obj["mask"])] == obj["category_id"] + 1).all()
        assert label.max() <= len(shapes.CLASSES)
    assert ensure_semseg(tmp_path, train=3, val=2, size=64) == root  # a second call finds it done
