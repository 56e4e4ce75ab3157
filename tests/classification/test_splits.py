"""The shared classification data layer: each labelled layout detected and read as shipped (CIFAR exported to
folders, Flowers-102, Pets), the content digest that names a dataset, and subsets reaching linear and kNN."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from classification.linear import LinearConfig, LinearDataConfig, LinearOptimConfig, LinearRunConfig, linear_eval
from classification.splits import dataset_record, load_splits
from moco_core.config import ConfigError
from tests.layouts import (
    CIFAR10_CLASSES,
    PETS,
    WNIDS,
    cifar_folder_layout,
    flowers_layout,
    imagenet_layout,
    pets_layout,
    simclr_subset_file,
)


def _data(path: Path, **kwargs: object) -> LinearDataConfig:
    return LinearDataConfig(path=str(path), crop_size=32, resize=32, workers=0, **kwargs)  # type: ignore[arg-type]


def _labels(dataset: object) -> list[tuple[str, int]]:
    return [(Path(p).name, c) for p, c in dataset.samples]  # type: ignore[attr-defined]


def test_cifar_exported_to_folders_uses_test_as_val(tmp_path: Path) -> None:
    root = cifar_folder_layout(tmp_path / "cifar10")
    splits = load_splits(_data(root), augment=False)
    assert splits.classes == list(CIFAR10_CLASSES[:3]) and splits.layout == "imagefolder (test/ as val)"
    assert len(splits.train) == 12 and len(splits.val) == 6
    assert {Path(p).parent.parent.name for p, _ in splits.val.samples} == {"test"}


def test_flowers_as_torchvision_downloads_it(tmp_path: Path) -> None:
    """trnid + valid train, tstid tests; labels from imagelabels.mat (1-based) by image number; --data may name
    torchvision's root or flowers-102/ itself."""
    root = flowers_layout(tmp_path / "torchvision_root")
    for given in (root, root / "flowers-102"):
        splits = load_splits(_data(given), augment=False)
        # labels (1, 1, 2, 3, 2, 3, 1, 2, 3, 1, 2, 3): image i has labels[i - 1], class k is index k - 1
        assert _labels(splits.train) == [("image_00001.jpg", 0), ("image_00002.jpg", 0), ("image_00003.jpg", 1),
                                         ("image_00004.jpg", 2), ("image_00005.jpg", 1), ("image_00006.jpg", 2)]
        assert _labels(splits.val) == [("image_00007.jpg", 0), ("image_00008.jpg", 1), ("image_00009.jpg", 2),
                                       ("image_00010.jpg", 0), ("image_00011.jpg", 1), ("image_00012.jpg", 2)]
        assert splits.classes == ["001", "002", "003"] and splits.layout == "flowers-102"
        assert splits.root == root / "flowers-102"


def test_pets_as_torchvision_downloads_it(tmp_path: Path) -> None:
    root = pets_layout(tmp_path / "pets")
    splits = load_splits(_data(root), augment=False)
    assert splits.classes == [name for name, *_ in PETS] and splits.layout == "oxford-iiit-pet"
    assert _labels(splits.train)[:4] == [("Abyssinian_1.jpg", 0), ("Abyssinian_2.jpg", 0), ("Abyssinian_3.jpg", 0),
                                         ("american_bulldog_1.jpg", 1)]
    assert len(splits.train) == 9 and len(splits.val) == 6  # the stray .mat in images/ is not an image of a split
    assert _labels(splits.val)[-1] == ("Bengal_5.jpg", 2)


def test_a_pets_line_that_is_not_an_annotation_is_named(tmp_path: Path) -> None:
    root = pets_layout(tmp_path / "pets") / "oxford-iiit-pet"
    (root / "annotations" / "test.txt").write_text("Bengal_4 three 1 2\n")
    with pytest.raises(ConfigError, match=r"test.txt line 1: 'Bengal_4 three 1 2' is not"):
        load_splits(_data(root), augment=False)


def test_a_folder_without_splits_names_the_layouts_it_takes(tmp_path: Path) -> None:
    (tmp_path / "data" / "train" / "a").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"needs train/ and val/ \(or test/\) .* Flowers-102"):
        load_splits(_data(tmp_path / "data"), augment=False)


def test_the_content_digest_names_the_data_not_the_place(tmp_path: Path) -> None:
    """A copy elsewhere has the same digest (the report groups its runs with the original's); a file renamed,
    moved to another class or changed in size, and changed labels, give another."""
    root = cifar_folder_layout(tmp_path / "a" / "cifar10")

    def digest(path: Path) -> str:
        return dataset_record(str(path), load_splits(_data(path), augment=False))["content_sha256"]

    first = digest(root)
    copy = tmp_path / "b" / "cifar10"
    shutil.copytree(root, copy)
    assert digest(copy) == first
    image = copy / "train" / "bird" / "00008.png"
    image.rename(copy / "train" / "automobile" / "00008.png")
    assert digest(copy) != first
    image = (copy / "train" / "automobile" / "00008.png")
    image.rename(copy / "train" / "bird" / "00008.png")
    assert digest(copy) == first
    with open(copy / "test" / "bird" / "00005.png", "ab") as f:
        f.write(b"\0")
    assert digest(copy) != first
    flowers = flowers_layout(tmp_path / "f")
    before = digest(flowers)
    flowers_layout(tmp_path / "g", labels=(1, 1, 2, 3, 2, 3, 1, 2, 3, 1, 3, 3))
    shutil.copy(tmp_path / "g" / "flowers-102" / "imagelabels.mat", flowers / "flowers-102" / "imagelabels.mat")
    assert digest(flowers) != before
    record = dataset_record(str(flowers), load_splits(_data(flowers), augment=False))
    assert record["folder"] == "flowers-102" and record["layout"] == "flowers-102" and "subset" not in record


def test_knn_bank_is_the_subset_and_val_stays_whole(tmp_path: Path) -> None:
    from classification.knn import knn_eval

    root = imagenet_layout(tmp_path / "imagenet")
    names = [f"{WNIDS[0]}_1.JPEG", f"{WNIDS[1]}_4.JPEG", f"{WNIDS[3]}_0.JPEG"]
    listed = simclr_subset_file(tmp_path / "1percent.txt", names)
    path, _ = knn_eval("random", _data(root, subset=str(listed)), tmp_path / "knn", k=2, batch_size=8,
                       arch="resnet18", device_name="cpu")
    record = json.loads(path.read_text())
    assert record["dataset"]["train_images"] == 3 and record["dataset"]["val_images"] == 8
    assert record["dataset"]["subset"]["kind"] == "file" and record["dataset"]["subset"]["images"] == 3
    assert record["config"]["subset"] == str(listed)


def test_linear_trains_on_the_fraction_and_records_it(tmp_path: Path) -> None:
    root = imagenet_layout(tmp_path / "imagenet", train_per_class=10)
    cfg = LinearConfig(arch="resnet18", optim=LinearOptimConfig(epochs=1, milestones=(), batch_size=4),
                       data=_data(root, labels="10%", subset_seed=5),
                       run=LinearRunConfig(output_dir=str(tmp_path / "run"), device="cpu"))
    record = json.loads(linear_eval(cfg, "random", show_progress=False).read_text())
    # 10 a class (+ the gray and CMYK extra in classes 1 and 2; the truncated file of class 0 is skipped): 1 each
    assert record["dataset"]["train_images"] == 4 and record["dataset"]["val_images"] == 8
    assert record["dataset"]["subset"] == {"kind": "labels", "labels": "10%", "seed": 5, "images": 4, "of": 42}
    assert record["config"]["data"]["labels"] == "10%" and len(record["dataset"]["content_sha256"]) == 64
