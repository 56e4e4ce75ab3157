"""dense/data.py on ADE20K's release layout (tests/dense/layouts.py): the files found by name, labels shifted by
-1 with 0 ignored, and every broken file or layout refused in one line or skipped with a counted warning."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dense.data import IGNORE, ade_split, ensure_ade, read_label
from moco_core.data.data import DatasetError
from tests.dense.layouts import write_ade
from tests.moco_core.image_corpus import bomb_png

LABELS = "ADEChallengeData2016/annotations/training"


def test_the_release_layout_is_read_by_name(tmp_path: Path) -> None:
    root = write_ade(tmp_path)
    split = ade_split(root, "val")
    assert [(s.image.name, s.label.name) for s in split.samples] == [
        ("ADE_val_00000001.jpg", "ADE_val_00000001.png"), ("ADE_val_00000002.jpg", "ADE_val_00000002.png")]
    assert split.warning is None


def test_labels_shift_by_one_and_zero_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "label.png"
    Image.fromarray(np.array([[0, 1], [150, 2]], dtype=np.uint8)).save(path)
    assert read_label(path, 150).tolist() == [[IGNORE, 0], [149, 1]]


def test_a_value_beyond_the_classes_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "label.png"
    Image.fromarray(np.array([[0, 151]], dtype=np.uint8)).save(path)
    with pytest.raises(DatasetError, match=r"label.png: label value 151 is beyond the 150 classes") as err:
        read_label(path, 150)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("broken", "skipped"), [
    ("bomb", "DecompressionBombError"),  # 20000 x 20000 in 388 KB: refused from its header, never decoded
    ("rgb", "not a label map"),
    ("size", "label map 8x8, its image 40x32"),
    ("empty", "empty file"),
])
def test_unusable_label_maps_are_skipped_with_one_counted_warning(tmp_path: Path, broken: str,
                                                                  skipped: str) -> None:
    root = write_ade(tmp_path)
    label = root / LABELS / "ADE_train_00000002.png"
    if broken == "bomb":
        label.write_bytes(bomb_png())
    elif broken == "rgb":
        Image.new("RGB", (40, 32)).save(label)
    elif broken == "size":
        Image.new("L", (8, 8)).save(label)
    else:
        label.write_bytes(b"")
    split = ade_split(root, "train")
    assert [s.label.name for s in split.samples] == ["ADE_train_00000001.png", "ADE_train_00000003.png"]
    assert split.warning is not None and "skipped 1 of its 3" in split.warning and skipped in split.warning


@pytest.mark.parametrize(("damage", "message"), [
    ("no annotations", "annotations/training: no such folder (ADE20K as released"),
    ("a label missing", "ADE_train_00000002.png: missing, the label map of ADE_train_00000002.jpg"),
    ("no images", "images/training: no .jpg images"),
])
def test_broken_layouts_are_one_line(tmp_path: Path, damage: str, message: str) -> None:
    root = write_ade(tmp_path)
    if damage == "no annotations":
        for f in (root / LABELS).iterdir():
            f.unlink()
        (root / LABELS).rmdir()
    elif damage == "a label missing":
        (root / LABELS / "ADE_train_00000002.png").unlink()
    else:
        for f in (root / "ADEChallengeData2016/images/training").iterdir():
            f.unlink()
    with pytest.raises(DatasetError, match=message.replace("(", r"\(")) as err:
        ade_split(root, "train")
    assert "\n" not in str(err.value)


def test_the_embedded_set_is_the_scenes_in_ades_layout(tmp_path: Path) -> None:
    root = ensure_ade(tmp_path, train=2, val=1, size=64)
    split = ade_split(root, "train")
    assert [s.image.name for s in split.samples] == ["ADE_train_00000001.jpg", "ADE_train_00000002.jpg"]
    label = read_label(split.samples[0].label, 9)
    assert label.shape == (64, 64) and int(label.min()) == 0 and 1 <= int(label.max()) <= 8
    assert not (label == IGNORE).any() and torch.unique(label).numel() >= 2  # background and an object or more
