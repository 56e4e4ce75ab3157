"""Cityscapes instance segmentation: instanceIds read as detectron2 reads them, the layout's file names, and
cityscapesscripts' evaluator called on a hand-made ground truth whose AP is worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from moco_core.config import ConfigError
from moco_core.data.data import DatasetError
from transfer.detection.cityscapes import (
    CLASSES,
    cityscapes_evaluate,
    ensure_cityscapes,
    instances_of,
    load_cityscapes_data,
    parse_name,
)
from transfer.detection.datasets import DetectionData


def test_instance_ids_become_the_8_classes_crowds_and_masks() -> None:
    ids = np.full((6, 8), 7)  # road: stuff
    ids[0:2, 0:3] = 24000  # person 0
    ids[3:6, 0:2] = 24001  # person 1
    ids[0:4, 5:8] = 26005  # car 5
    ids[5, 4] = 26  # a car crowd region (id < 1000 is the label id)
    ids[4, 4] = 4  # static: no instances
    ids[4, 6:8] = 29000  # caravan: has instances but is not evaluated
    found = instances_of(ids)
    assert [(a["category_id"], a["iscrowd"], a["bbox"]) for a in found] == [
        (2, 1, [4.0, 5.0, 5.0, 6.0]),  # 26: car crowd, contiguous id 2
        (0, 0, [0.0, 0.0, 3.0, 2.0]),
        (0, 0, [0.0, 3.0, 2.0, 6.0]),
        (2, 0, [5.0, 0.0, 8.0, 4.0])]
    from pycocotools import mask as mask_utils

    assert (mask_utils.decode(found[3]["segmentation"]) == (ids == 26005)).all()
    assert list(CLASSES.values()) == ["person", "rider", "car", "truck", "bus", "train", "motorcycle", "bicycle"]


def test_parse_name_takes_detectron2s_names_only() -> None:
    spec = parse_name("cityscapes_fine_instance_seg_val")
    assert (spec.folder, spec.annotations) == (Path("cityscapes/leftImg8bit/val"), Path("cityscapes/gtFine/val"))
    with pytest.raises(ConfigError, match="cityscapes_fine_instance_seg_<split>"):
        parse_name("cityscapes_fine_sem_seg_val")


def test_embedded_set_has_cityscapes_file_names_and_reads_back(tmp_path: Path) -> None:
    root = ensure_cityscapes(tmp_path, train=4, val=2, size=48)
    stems = sorted(p.name for p in (root / "cityscapes/gtFine/train/alpha").iterdir())
    assert stems[:4] == ["alpha_000000_000019_gtFine_instanceIds.png", "alpha_000000_000019_gtFine_labelIds.png",
                         "alpha_000000_000019_gtFine_polygons.json", "alpha_000001_000019_gtFine_instanceIds.png"]
    assert (root / "cityscapes/leftImg8bit/val/gamma/gamma_000000_000019_leftImg8bit.png").is_file()
    polygons = json.loads((root / "cityscapes/gtFine/val/gamma/gamma_000000_000019_gtFine_polygons.json").read_text())
    assert polygons["imgHeight"] == 48 and polygons["objects"][0]["label"] in CLASSES.values()

    class Cfg:
        class data:  # noqa: N801 - the attribute path of a TransferConfig
            path, train, test = "x", ("cityscapes_fine_instance_seg_train",), "cityscapes_fine_instance_seg_val"

    specs = [parse_name(n) for n in (*Cfg.data.train, Cfg.data.test)]
    data = load_cityscapes_data(Cfg, root, specs)
    assert len(data.test) == 2 and data.test[0]["image_id"] == "gamma_000000_000019"
    assert data.contiguous_to_original == {0: 24, 1: 25, 2: 26, 3: 27, 4: 28, 5: 31, 6: 32, 7: 33}
    ids = np.asarray(Image.open(root / "cityscapes/gtFine/val/gamma/gamma_000000_000019_gtFine_instanceIds.png"))
    assert len(data.test[0]["annotations"]) == len({int(v) for v in np.unique(ids) if v >= 1000})
    (root / "cityscapes/gtFine/train/beta/beta_000000_000019_gtFine_instanceIds.png").unlink()
    with pytest.raises(DatasetError, match="beta_000000_000019_gtFine_instanceIds.png not found"):
        load_cityscapes_data(Cfg, root, specs)


# ---- cityscapesscripts on a hand-made ground truth ----

def _gt_root(tmp_path: Path) -> Path:
    """Two 40x60 val images of city "toy": image 0 holds a person (24000) at rows 0-19, cols 0-19 and a car (26000)
    at rows 20-39, cols 30-59; image 1 a person (24001) at rows 10-29, cols 20-39. Everything else is road."""
    gt = tmp_path / "cityscapes/gtFine/val/toy"
    gt.mkdir(parents=True)
    images = tmp_path / "cityscapes/leftImg8bit/val/toy"
    images.mkdir(parents=True)
    first, second = np.full((40, 60), 7, dtype=np.uint16), np.full((40, 60), 7, dtype=np.uint16)
    first[0:20, 0:20], first[20:40, 30:60], second[10:30, 20:40] = 24000, 26000, 24001
    for n, ids in enumerate((first, second)):
        stem = f"toy_000000_{n:06d}"
        Image.fromarray(ids).save(gt / f"{stem}_gtFine_instanceIds.png")
        Image.fromarray(np.zeros((40, 60, 3), dtype=np.uint8)).save(images / f"{stem}_leftImg8bit.png")
    return tmp_path


def _rle(rows: slice, cols: slice) -> dict[str, Any]:
    from pycocotools import mask as mask_utils

    mask = np.zeros((40, 60), dtype=np.uint8)
    mask[rows, cols] = 1
    rle = mask_utils.encode(np.asfortranarray(mask))
    return {"size": [40, 60], "counts": rle["counts"].decode("ascii")}


def _data(root: Path) -> DetectionData:
    test = [{"image_id": f"toy_000000_{n:06d}", "annotations": []} for n in range(2)]
    return DetectionData(root, "toy", [], test, list(CLASSES.values()), dict(enumerate(CLASSES)),
                         root / "cityscapes/gtFine/val")


PERSON_0 = {"image_id": "toy_000000_000000", "category_id": 24, "score": 0.9,
            "segmentation": _rle(slice(0, 20), slice(0, 20))}
CAR_0 = {"image_id": "toy_000000_000000", "category_id": 26, "score": 0.8,
         "segmentation": _rle(slice(20, 40), slice(30, 60))}
PERSON_1 = {"image_id": "toy_000000_000001", "category_id": 24, "score": 0.7,
            "segmentation": _rle(slice(10, 30), slice(20, 40))}


@pytest.mark.parametrize(("results", "ap", "ap50"), [
    ([PERSON_0, CAR_0, PERSON_1], 100.0, 100.0),  # every instance found exactly
    ([], 0.0, 0.0),
    # Persons found, the car missed: the car's class scores 0, the mean over the 2 classes with instances is 50
    ([PERSON_0, PERSON_1], 50.0, 50.0),
    # The car predicted over its left 2/3 (IoU 2/3, above 0.50-0.65, 4 of the 10 thresholds): car AP 0.4, AP50 1
    ([PERSON_0, PERSON_1, {**CAR_0, "segmentation": _rle(slice(20, 40), slice(30, 50))}], 70.0, 100.0),
])
def test_cityscapesscripts_scores_toy_cases_as_worked_out_by_hand(tmp_path: Path, results: list, ap: float,
                                                                   ap50: float, monkeypatch: Any) -> None:
    pytest.importorskip("cityscapesscripts")
    monkeypatch.chdir(tmp_path)  # nothing may be written into the working directory
    metrics = cityscapes_evaluate(results, _data(_gt_root(tmp_path / "data")))
    assert metrics == pytest.approx({"segm_AP": ap, "segm_AP50": ap50}, abs=1e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_the_real_layout_fixture_loads_through_the_configured_names(tmp_path: Path) -> None:
    from tests.layouts import detection_layout
    from transfer.detection.config import load_transfer_config
    from transfer.detection.datasets import load_data

    root = detection_layout(tmp_path / "datasets", train=6, test=3)
    data = load_data(load_transfer_config("cityscapes", None, [], {"data": {"path": str(root)}}))
    assert data.name == "Cityscapes train_fine" and len(data.test) == 3 and len(data.class_names) == 8
    assert data.coco_gt == root / "cityscapes" / "gtFine" / "val"
