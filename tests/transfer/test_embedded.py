"""The embedded VOC and COCO layouts: readable by the real readers, faithful to the shapes annotations, made once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from moco_core import shapes
from transfer.coco import load_coco
from transfer.embedded import ensure_coco, ensure_voc
from transfer.voc import load_voc


def shapes_objects(shapes_root: Path, split: str) -> dict[str, list[dict]]:
    """Shapes annotations by image file, to look up what each generated image came from."""
    return {img["file"]: img["objects"] for img in shapes.load_annotations(shapes_root, split)["images"]}


def test_voc_layout_round_trips_the_boxes(shapes_root: Path, tmp_path: Path) -> None:
    root = ensure_voc(tmp_path, trainval=12, test=5, shapes_root=shapes_root)
    voc = root / "VOC2007"
    assert (voc / "ImageSets" / "Main" / "trainval.txt").read_text().split() == [f"{i:06d}" for i in range(12)]
    train = load_voc(voc, "trainval", class_names=shapes.CLASSES)
    test = load_voc(voc, "test", class_names=shapes.CLASSES)
    assert (len(train), len(test)) == (12, 5)
    assert not {d["image_id"] for d in train} & {d["image_id"] for d in test}
    # round-robin over classes: the first 8 trainval images have 8 different main objects
    assert sorted(d["annotations"][0]["category_id"] for d in train[:8]) == list(range(8))
    source = shapes.load_annotations(shapes_root, "train")["images"]
    by_class = {c: [img for img in source if img["label"] == c] for c in range(8)}
    for n, d in enumerate(train):
        original = by_class[n % 8][n // 8]  # image n is the (n // 8)-th image of class n % 8
        assert (d["width"], d["height"]) == (2 * original["width"], 2 * original["height"])
        with Image.open(d["file_name"]) as im:
            assert (im.format, im.size) == ("JPEG", (d["width"], d["height"]))
        assert [a["category_id"] for a in d["annotations"]] == [o["category_id"] for o in original["objects"]]
        for ann, obj in zip(d["annotations"], original["objects"], strict=True):
            expected = 2 * np.asarray(obj["bbox"])
            assert np.abs(np.asarray(ann["bbox"]) - expected).max() <= 1.0  # whole pixels, 1-based in the XML
            assert not ann["difficult"]


def test_coco_layout_round_trips_boxes_and_polygons(shapes_root: Path, tmp_path: Path) -> None:
    root = ensure_coco(tmp_path, train=9, val=16, scale=1, shapes_root=shapes_root)
    coco = root / "coco"
    dicts, names, mapping = load_coco(coco / "annotations" / "instances_val2017.json", coco / "val2017")
    assert names == list(shapes.CLASSES)
    assert mapping == {i: 2 * i + 1 for i in range(8)}  # non-contiguous COCO ids 1, 3, ..., 15
    assert len(dicts) == 16 and len(load_coco(coco / "annotations" / "instances_train2017.json",
                                              coco / "train2017")[0]) == 9
    val = shapes.load_annotations(shapes_root, "val")["images"]
    by_class = {c: [img for img in val if img["label"] == c] for c in range(8)}
    for n, d in enumerate(dicts):
        original = by_class[n % 8][n // 8]
        assert d["image_id"] == n + 1 and Path(d["file_name"]).name == f"{n + 1:012d}.jpg"
        for ann, obj in zip(d["annotations"], original["objects"], strict=True):
            assert ann["category_id"] == obj["category_id"]
            assert ann["bbox"] == pytest.approx(obj["bbox"], abs=1e-9)
            assert ann["segmentation"] == [pytest.approx(obj["polygon"])]
    doc = json.loads((coco / "annotations" / "instances_val2017.json").read_text())
    assert all(a["iscrowd"] == 0 and a["area"] > 0 for a in doc["annotations"])


def test_second_call_reuses_and_other_parameters_regenerate(shapes_root: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCO_DATA_HOME", str(tmp_path / "home"))
    root = ensure_voc(trainval=4, test=2, shapes_root=shapes_root)
    assert root.parent == tmp_path / "home" and root.name.endswith("-detection-v1-4x2-scale2")
    done = root / "VOC2007" / "DONE"
    jpeg = root / "VOC2007" / "JPEGImages" / "000000.jpg"
    stamp = (done.stat().st_ino, done.stat().st_mtime_ns, jpeg.stat().st_ino, jpeg.stat().st_mtime_ns)
    assert ensure_voc(trainval=4, test=2, shapes_root=shapes_root) == root
    assert (done.stat().st_ino, done.stat().st_mtime_ns, jpeg.stat().st_ino, jpeg.stat().st_mtime_ns) == stamp
    assert [p.name for p in root.iterdir()] == ["VOC2007"]  # no temporary directory left behind
    assert ensure_coco(root, train=4, val=2, shapes_root=shapes_root) == root  # COCO beside VOC
    assert sorted(p.name for p in root.iterdir()) == ["VOC2007", "coco"]
    ensure_voc(root, trainval=3, test=2, shapes_root=shapes_root)  # other counts at the same root
    assert len(load_voc(root / "VOC2007", "trainval", class_names=shapes.CLASSES)) == 3
    with pytest.raises(ValueError, match="counts and scale must be >= 1"):
        ensure_voc(root, trainval=0, shapes_root=shapes_root)
