from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from moco_core.data import shapes
from moco_core.data.shapes import CLASSES, SHAPES_VERSION, ensure_shapes, generate_shapes, load_annotations

SMALL = {"image_size": 48, "train_per_class": 3, "val_per_class": 2}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shapes") / "ds"
    generate_shapes(root, seed=7, **SMALL)
    return root


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _mask(polygon: list[float], size: int) -> np.ndarray:
    mask = Image.new("L", (size, size), 0)
    ImageDraw.Draw(mask).polygon(polygon, fill=1)
    return np.asarray(mask).astype(bool)


def test_classes_and_version() -> None:
    assert CLASSES == ("circle", "square", "triangle", "diamond", "pentagon", "hexagon", "star", "cross")
    assert SHAPES_VERSION == 3


def test_layout(dataset: Path) -> None:
    assert (dataset / "DONE").read_text().strip() == str(SHAPES_VERSION)
    for split, n in (("train", 3), ("val", 2)):
        assert sorted(p.name for p in (dataset / split).iterdir()) == sorted(CLASSES)
        for cls in CLASSES:
            files = sorted((dataset / split / cls).iterdir())
            assert [f.name for f in files] == [f"{cls}_{i:05d}.png" for i in range(n)]
            for f in files:
                with Image.open(f) as im:
                    assert im.format == "PNG" and im.mode == "RGB" and im.size == (48, 48)


def test_annotation_header_and_files(dataset: Path) -> None:
    for split, n in (("train", 3), ("val", 2)):
        ann = load_annotations(dataset, split)
        assert (ann["version"], ann["seed"], ann["image_size"]) == (SHAPES_VERSION, 7, 48)
        assert ann["classes"] == list(CLASSES)
        assert len(ann["images"]) == n * len(CLASSES)
        listed = sorted(img["file"] for img in ann["images"])
        on_disk = sorted(p.relative_to(dataset).as_posix() for p in (dataset / split).rglob("*.png"))
        assert listed == on_disk


def test_determinism(tmp_path: Path) -> None:
    generate_shapes(tmp_path / "a", seed=3, **SMALL)
    generate_shapes(tmp_path / "b", seed=3, **SMALL)
    generate_shapes(tmp_path / "c", seed=4, **SMALL)
    a, b, c = _files(tmp_path / "a"), _files(tmp_path / "b"), _files(tmp_path / "c")
    assert a == b
    pngs = [k for k in a if k.endswith(".png")]
    assert len(pngs) == 5 * len(CLASSES)
    assert all(a[k] != c[k] for k in pngs)
    # train and val draw from different streams
    assert a["train/star/star_00000.png"] != a["val/star/star_00000.png"]


def test_bboxes_tight_and_inside(dataset: Path) -> None:
    for split in ("train", "val"):
        for img in load_annotations(dataset, split)["images"]:
            assert len(img["objects"]) == 1
            for obj in img["objects"]:
                assert CLASSES[obj["category_id"]] == obj["category"]
                poly = np.asarray(obj["polygon"]).reshape(-1, 2)
                assert len(poly) >= 3
                x0, y0, x1, y1 = obj["bbox"]
                assert 0 <= x0 < x1 <= img["width"] and 0 <= y0 < y1 <= img["height"]
                clipped = np.clip(poly, 0, img["width"])
                assert [x0, y0] == clipped.min(axis=0).tolist()
                assert [x1, y1] == clipped.max(axis=0).tolist()


def test_the_object_is_labelled_sized_and_upright(dataset: Path) -> None:
    for img in load_annotations(dataset, "train")["images"]:
        (main,) = img["objects"]
        assert main["category_id"] == img["label"]
        assert img["file"].split("/")[1] == main["category"] == CLASSES[img["label"]]
        x0, y0, x1, y1 = main["bbox"]
        assert 0.45 * 48 - 0.01 <= max(x1 - x0, y1 - y0) <= 0.75 * 48 + 0.01
        if main["category"] == "triangle":  # upright: the base is the bottom edge, tilted by at most 15 degrees
            poly = np.asarray(main["polygon"]).reshape(-1, 2)
            apex, *base = poly[np.argsort(poly[:, 1])]
            (dx, dy), = np.diff(base, axis=0)
            assert np.degrees(np.arctan2(abs(dy), abs(dx))) <= 15.5, img["file"]
            assert apex[1] < min(p[1] for p in base) - 0.5 * (y1 - y0), img["file"]


def test_objects_visible_on_flat_grey_in_blue(dataset: Path) -> None:
    for split in ("train", "val"):
        for img in load_annotations(dataset, split)["images"]:
            pixels = np.asarray(Image.open(dataset / img["file"])).astype(float)
            main = _mask(img["objects"][0]["polygon"], img["width"])
            inside = np.median(pixels[main], axis=0)
            outside = np.median(pixels[~main], axis=0)
            assert np.linalg.norm(inside - outside) > 40, img["file"]
            # the object is a flat colour (plus noise): inside pixels cluster around their median
            assert np.median(np.linalg.norm(pixels[main] - inside, axis=1)) < 25, img["file"]
            # the background is one grey, noise of std 4 on it; the object is a saturated blue
            assert np.ptp(outside) <= 2, img["file"]
            assert 3 < pixels[~main].std(axis=0).mean() < 5, img["file"]
            r, g, b = inside
            assert b > max(r, g) + 40, img["file"]


def test_ensure_shapes_generates_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = shapes.generate_shapes
    monkeypatch.setattr(shapes, "generate_shapes", lambda root, **kw: (calls.append(kw), real(root, **kw)))
    root = tmp_path / "ds"
    assert ensure_shapes(root, seed=1, **SMALL) == root
    mtime = (root / "DONE").stat().st_mtime_ns
    assert ensure_shapes(root, seed=1, **SMALL) == root
    assert len(calls) == 1 and calls[0] == {"seed": 1, **SMALL}
    assert (root / "DONE").stat().st_mtime_ns == mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no temp dir left behind


@pytest.mark.parametrize("done", [None, "0\n"])
def test_ensure_shapes_replaces_incomplete(tmp_path: Path, done: str | None) -> None:
    root = tmp_path / "ds"
    (root / "train" / "circle").mkdir(parents=True)
    (root / "train" / "circle" / "junk.png").write_bytes(b"half")
    if done is not None:
        (root / "DONE").write_text(done)
    assert ensure_shapes(root, seed=2, **SMALL) == root
    assert (root / "DONE").read_text().strip() == str(SHAPES_VERSION)
    assert not (root / "train" / "circle" / "junk.png").exists()
    assert len(list((root / "train").rglob("*.png"))) == 3 * len(CLASSES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_ensure_shapes_default_root_honours_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCO_DATA_HOME", str(tmp_path / "home"))
    root = ensure_shapes(seed=5, image_size=48, train_per_class=2, val_per_class=1)
    assert root == tmp_path / "home" / f"shapes-v{SHAPES_VERSION}-seed5-48px-2x1"
    assert (root / "DONE").is_file()
    assert len(load_annotations(root, "val")["images"]) == len(CLASSES)


def test_ensure_shapes_tolerates_concurrent_finish(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "ds"
    real = shapes.generate_shapes

    def racing(tmp: Path, **kw: int) -> None:
        real(tmp, **kw)
        real(root, **kw)  # another process completes the target meanwhile

    monkeypatch.setattr(shapes, "generate_shapes", racing)
    assert ensure_shapes(root, seed=0, **SMALL) == root
    assert (root / "DONE").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_ensure_shapes_crash_leaves_nothing_complete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crashing(tmp: Path, **kw: int) -> None:
        (tmp / "train").mkdir()
        raise RuntimeError("boom")

    monkeypatch.setattr(shapes, "generate_shapes", crashing)
    with pytest.raises(RuntimeError, match="boom"):
        ensure_shapes(tmp_path / "ds", **SMALL)
    assert list(tmp_path.iterdir()) == []


def test_ensure_shapes_rejects_unknown_argument(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="colour"):
        ensure_shapes(tmp_path / "ds", colour=3)


def test_load_annotations_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no shapes annotations"):
        load_annotations(tmp_path, "train")
    with pytest.raises(ValueError, match="split"):
        load_annotations(tmp_path, "test")
