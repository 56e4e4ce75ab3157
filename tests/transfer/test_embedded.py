"""The embedded detection scenes: what they hold (several objects, small ones, occlusion, clutter, classes told
apart by shape alone), and their VOC and COCO layouts, readable by the real readers and made once."""

from __future__ import annotations

import colorsys
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw
from pycocotools import mask as mask_utils

from moco_core.data import shapes
from transfer.detection.coco import load_coco
from transfer.detection.voc import load_voc
from transfer.embedded import ensure_coco, ensure_voc, scenes

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")  # pycocotools' decode


@pytest.fixture(scope="module")
def train_scenes() -> list[tuple[Image.Image, list[dict]]]:
    return list(scenes("train", 150))


def filled(outline: np.ndarray, size: int) -> np.ndarray:
    """The pixels of the whole outline, rasterised here with PIL's polygon fill as the images are drawn."""
    canvas = Image.new("1", (size, size), 0)
    ImageDraw.Draw(canvas).polygon([tuple(p) for p in outline.tolist()], fill=1)
    return np.asarray(canvas, dtype=bool)


def test_scenes_hold_several_objects_of_any_class_at_least_half_visible(train_scenes: list) -> None:
    counts = [len(objects) for _, objects in train_scenes]
    assert min(counts) >= 2 and max(counts) == 6 and 3 < np.mean(counts) < 5
    classes = [o["category_id"] for _, objects in train_scenes for o in objects]
    assert set(classes) == set(range(len(shapes.CLASSES)))
    assert min(np.bincount(classes)) > 0.5 * len(classes) / len(shapes.CLASSES)  # no class is rare
    occluded = 0
    for image, objects in train_scenes:
        assert image.size == (128, 128) and image.mode == "RGB"
        seen = np.zeros((128, 128), dtype=int)
        for obj in objects:
            whole = filled(obj["outline"], 128)
            assert not (obj["mask"] & ~whole).any()  # what is visible lies within the object
            assert obj["mask"].sum() >= 0.5 * whole.sum()
            occluded += obj["mask"].sum() < whole.sum()
            seen += obj["mask"]
        assert seen.max() <= 1  # masks never overlap
    assert occluded > 0.1 * len(classes)


def test_sizes_span_small_to_large_and_boxes_are_the_visible_pixels(train_scenes: list) -> None:
    areas, extents = [], []
    for _, objects in train_scenes:
        for obj in objects:
            ys, xs = np.nonzero(obj["mask"])
            assert obj["bbox"] == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
            areas.append(obj["mask"].sum())
            extents.append(np.ptp(obj["outline"], axis=0).max())
    assert 0.1 * 128 - 1e-6 <= min(extents) and max(extents) <= 0.55 * 128 + 1e-6
    small = np.mean(np.asarray(areas) < 32 ** 2)  # COCO's small objects
    assert 0.5 < small < 0.95 and max(areas) > 48 ** 2 / 2


def test_colour_says_nothing_of_the_class(train_scenes: list) -> None:
    hues: dict[int, list[float]] = {}
    for image, objects in train_scenes:
        pixels = np.asarray(image, dtype=float) / 255
        for obj in objects:
            r, g, b = pixels[obj["mask"]].mean(axis=0)
            hues.setdefault(obj["category_id"], []).append(colorsys.rgb_to_hsv(r, g, b)[0])
    means = [np.mean(h) for h in hues.values()]
    assert all(0.5 < m < 0.7 for m in means)  # blues for every class
    assert np.ptp(means) < 0.02


def test_the_background_holds_unlabelled_clutter(train_scenes: list) -> None:
    """Away from every object, the scene is more than a smooth grey gradient: lines and blobs in blues and greys."""
    cluttered = 0
    for image, objects in train_scenes[:40]:
        rgb = np.asarray(image, dtype=float)
        free = ~np.any([filled(o["outline"], 128) for o in objects], axis=0)
        saturation = rgb.max(axis=2) - rgb.min(axis=2)
        blue = (saturation > 60) & free  # noise of std 4 on a grey never reaches it
        grey_steps = np.abs(np.diff(rgb.mean(axis=2), axis=1))[:, :-1][free[:, 1:-1]]
        cluttered += blue.sum() > 20 or (grey_steps > 40).sum() > 10
    assert cluttered >= 36


def test_scenes_are_a_function_of_their_arguments() -> None:
    first = [np.asarray(image) for image, _ in scenes("test", 3)]
    assert all((a == np.asarray(b)).all() for a, (b, _) in zip(first, scenes("test", 3), strict=True))
    assert not (first[0] == np.asarray(next(iter(scenes("train", 1)))[0])).all()
    assert not (first[0] == np.asarray(next(iter(scenes("test", 1, seed=1)))[0])).all()
    image, _ = next(iter(scenes("test", 1, size=64)))
    assert image.size == (64, 64)


def test_voc_layout_holds_the_scenes_boxes(tmp_path: Path) -> None:
    root = ensure_voc(tmp_path, trainval=12, test=5, size=64)
    voc = root / "VOC2007"
    assert (voc / "ImageSets" / "Main" / "trainval.txt").read_text().split() == [f"{i:06d}" for i in range(12)]
    train = load_voc(voc, "trainval", class_names=shapes.CLASSES)
    test = load_voc(voc, "test", class_names=shapes.CLASSES)
    assert (len(train), len(test)) == (12, 5)
    assert not {d["image_id"] for d in train} & {d["image_id"] for d in test}
    for d, (image, objects) in zip(train, scenes("train", 12, size=64), strict=True):
        assert (d["width"], d["height"]) == (64, 64)
        with Image.open(d["file_name"]) as im:
            assert (im.format, im.size) == ("JPEG", (64, 64))
            assert np.abs(np.asarray(im, dtype=float) - np.asarray(image, dtype=float)).mean() < 8  # JPEG of noise
        assert [a["category_id"] for a in d["annotations"]] == [o["category_id"] for o in objects]
        for ann, obj in zip(d["annotations"], objects, strict=True):
            assert ann["bbox"] == obj["bbox"] and not ann["difficult"]


def test_coco_layout_holds_the_scenes_boxes_and_masks(tmp_path: Path) -> None:
    root = ensure_coco(tmp_path, train=9, val=16, size=64)
    coco = root / "coco"
    dicts, names, mapping = load_coco(coco / "annotations" / "instances_val2017.json", coco / "val2017")
    assert names == list(shapes.CLASSES)
    assert mapping == {i: 2 * i + 1 for i in range(8)}  # non-contiguous COCO ids 1, 3, ..., 15
    assert len(dicts) == 16 and len(load_coco(coco / "annotations" / "instances_train2017.json",
                                              coco / "train2017")[0]) == 9
    for n, (d, (_, objects)) in enumerate(zip(dicts, scenes("test", 16, size=64), strict=True)):
        assert d["image_id"] == n + 1 and Path(d["file_name"]).name == f"{n + 1:012d}.jpg"
        for ann, obj in zip(d["annotations"], objects, strict=True):
            assert ann["category_id"] == obj["category_id"] and ann["bbox"] == obj["bbox"]
            assert (mask_utils.decode(ann["segmentation"]).astype(bool) == obj["mask"]).all()
    doc = json.loads((coco / "annotations" / "instances_val2017.json").read_text())
    masks = {a["id"]: mask_utils.decode(a["segmentation"]) for a in doc["annotations"]}
    assert all(a["iscrowd"] == 0 and a["area"] == masks[a["id"]].sum() > 0 for a in doc["annotations"])


def test_second_call_reuses_and_other_parameters_regenerate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCO_DATA_HOME", str(tmp_path / "home"))
    root = ensure_voc(trainval=4, test=2, size=64)
    assert root.parent == tmp_path / "home" and root.name == "scenes-v2-seed0-64px-4x2"
    done = root / "VOC2007" / "DONE"
    jpeg = root / "VOC2007" / "JPEGImages" / "000000.jpg"
    stamp = (done.stat().st_ino, done.stat().st_mtime_ns, jpeg.stat().st_ino, jpeg.stat().st_mtime_ns)
    assert ensure_voc(trainval=4, test=2, size=64) == root
    assert (done.stat().st_ino, done.stat().st_mtime_ns, jpeg.stat().st_ino, jpeg.stat().st_mtime_ns) == stamp
    assert [p.name for p in root.iterdir()] == ["VOC2007"]  # no temporary directory left behind
    assert ensure_coco(root, train=4, val=2, size=64) == root  # COCO beside VOC
    assert sorted(p.name for p in root.iterdir()) == ["VOC2007", "coco"]
    ensure_voc(root, trainval=3, test=2, size=64)  # other counts at the same root
    assert len(load_voc(root / "VOC2007", "trainval", class_names=shapes.CLASSES)) == 3
    with pytest.raises(ValueError, match="counts must be >= 1"):
        ensure_voc(root, trainval=0)
    with pytest.raises(ValueError, match="size >= 32"):
        ensure_voc(root, size=16)
