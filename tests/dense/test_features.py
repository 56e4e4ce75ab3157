"""dense/features.py: labels brought to the patch grid by majority (against hand-worked grids), and a pair cut
short after its header skipped when extracted, named in the split's unreadable list."""

from __future__ import annotations

from pathlib import Path

import torch

from dense.data import IGNORE, ade_split
from dense.features import DenseView, extract_patches, patch_labels
from moco_core.model.backbone import load_backbone
from tests.dense.layouts import write_ade

X = IGNORE


def test_majority_by_hand() -> None:
    label = torch.tensor([[0, 0, 1, 1],
                          [0, 1, 1, 1],
                          [X, X, 2, 2],
                          [X, 2, 3, 3]])
    # top-left: 0 0 0 1 -> 0; top-right: all 1; bottom-left: ignored pixels do not vote, 2 wins (nearest to the
    # corner or the centre would give the ignore label); bottom-right: 2 2 3 3, a tie: the lower class
    assert patch_labels(label, 4, 2, 4).tolist() == [[0, 1], [2, 2]]


def test_a_patch_with_no_labelled_pixel_is_ignored_and_the_label_is_resized_first() -> None:
    label = torch.tensor([[X, 1], [3, 3]])  # resized to 4 x 4 by nearest neighbour: each pixel a 2 x 2 block
    assert patch_labels(label, 4, 2, 4).tolist() == [[X, 1], [3, 3]]
    assert patch_labels(label, 4, 4, 4).tolist() == [[3]]  # one patch: 3 covers half, 1 a quarter


def test_a_truncated_picture_is_left_out_and_named(tmp_path: Path) -> None:
    root = write_ade(tmp_path, train=3, size=32)
    broken = root / "ADEChallengeData2016/images/training/ADE_train_00000002.jpg"
    broken.write_bytes(broken.read_bytes()[:-400])  # its header whole: the pair check passes, decoding fails
    split = ade_split(root, "train")
    assert len(split.samples) == 3
    model, _ = load_backbone(None, 1, arch="resnet18")
    found = extract_patches(model, split, tap="layer3", view=DenseView(32, (0.5,) * 3, (0.25,) * 3), num_classes=3,
                            batch_size=2, device=torch.device("cpu"))
    assert found.features["layer3"].shape == (2 * 2 * 2, 256)  # 2 images of 2 x 2 patches (stride 16 at 32 px)
    assert torch.unique(found.labels[:, 1]).tolist() == [0, 2]  # the images' indices in the split
    assert len(split.unreadable) == 1 and split.unreadable[0].startswith("ADE_train_00000002.jpg (")
