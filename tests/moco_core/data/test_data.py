"""Tests for moco_core.data.data: scanning layouts, unreadable files, errors, RGB loading, decode fallback."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile

from moco_core.data import data
from moco_core.data.data import (
    IMAGE_EXTENSIONS,
    DatasetError,
    ImageDataset,
    ImageList,
    load_rgb,
    scan_images,
    warn_revisited,
    warn_skipped,
)


def _save(path: Path, size: tuple[int, int] = (8, 6), colour: int = 0, mode: str = "RGB") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, colour).save(path)
    return path


def _noise_jpeg(path: Path, size: int = 64) -> Path:
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8), "RGB").save(path, quality=95)
    return path


def _identity(img: Image.Image) -> Image.Image:
    return img


def test_extensions_are_lowercase() -> None:
    assert all(ext == ext.lower() and ext.startswith(".") for ext in IMAGE_EXTENSIONS)
    assert {".jpg", ".jpeg", ".png", ".webp", ".tiff"} <= set(IMAGE_EXTENSIONS)


def test_truncated_images_are_not_loaded_silently() -> None:
    assert not ImageFile.LOAD_TRUNCATED_IMAGES


def test_imagefolder_layout(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _save(root / "dog" / "b.jpg")
    _save(root / "dog" / "a.PNG")
    _save(root / "dog" / "nested" / "c.jpeg")
    _save(root / "cat" / "z.bmp")
    _save(root / "cat" / ".hidden.jpg")
    (root / "cat" / "notes.txt").write_text("not an image")
    _save(root / ".cache" / "x.jpg")
    (root / "empty").mkdir()
    found = scan_images(root)
    assert isinstance(found, ImageList)
    assert found.classes == ["cat", "dog"]
    assert found.samples == [
        (str(root / "cat" / "z.bmp"), 0),
        (str(root / "dog" / "a.PNG"), 1),
        (str(root / "dog" / "b.jpg"), 1),
        (str(root / "dog" / "nested" / "c.jpeg"), 1),
    ]
    assert found.skipped == []


def test_links_are_followed_but_each_directory_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's cases: ``ln -s . train/loop`` repeated the dataset about 41 times; inside a class folder a loop
    would mislabel; several self-links hung the scan. The links out of the tree are followed as the user asks
    (MOCO_FOLLOW_LINKS=1; without it they are refused: tests/moco_core/test_links.py)."""
    monkeypatch.setenv("MOCO_FOLLOW_LINKS", "1")
    root = tmp_path / "data"
    for cls in ("cat", "dog"):
        for i in range(2):
            _save(root / "train" / cls / f"{i}.jpg")
    elsewhere = tmp_path / "elsewhere"
    _save(elsewhere / "x.jpg")
    (root / "train" / "loop").symlink_to(".")  # a class folder that is the root itself
    for k in range(4):  # self-links inside a class: os.walk's followlinks would never end
        (root / "train" / "cat" / f"self{k}").symlink_to(".")
    (root / "train" / "dog" / "to_cat").symlink_to("../cat")  # a link into another class: not theirs
    (root / "train" / "dog" / "more").symlink_to(elsewhere)  # a link out of the tree: followed (as asked), once
    (root / "train" / "dog" / "again").symlink_to(elsewhere)
    (root / "train" / "dog" / "dangling").symlink_to(tmp_path / "gone")
    found = scan_images(root)
    assert found.classes == ["cat", "dog"]
    assert found.samples == [
        (str(root / "train" / "cat" / "0.jpg"), 0), (str(root / "train" / "cat" / "1.jpg"), 0),
        (str(root / "train" / "dog" / "0.jpg"), 1), (str(root / "train" / "dog" / "1.jpg"), 1),
        (str(root / "train" / "dog" / "again" / "x.jpg"), 1),  # "again" sorts before "more": read there
    ]
    links = sorted(Path(link).name for link, _ in found.revisited)
    assert links == ["loop", "more", "self0", "self1", "self2", "self3", "to_cat"]
    note = warn_revisited(found.revisited)
    assert note.startswith("followed symbolic links, reading each directory once: 7 links to a directory already "
                           "read were not followed again (") and note.endswith(" and 4 more)")


def test_train_split_is_preferred(tmp_path: Path) -> None:
    _save(tmp_path / "train" / "a" / "1.jpg")
    _save(tmp_path / "train" / "b" / "2.jpg")
    _save(tmp_path / "val" / "c" / "3.jpg")
    found = scan_images(tmp_path)
    assert found.classes == ["a", "b"]
    assert [label for _, label in found.samples] == [0, 1]
    assert scan_images(tmp_path, split="val").classes == ["c"]
    assert scan_images(tmp_path / "train").classes == ["a", "b"]  # a bare train dir works too



def test_a_dataset_root_deeper_down_is_named_not_read_as_one_class(tmp_path: Path) -> None:
    """ImageNet as Kaggle ships it: ILSVRC/{Annotations,Data,ImageSets}/CLS-LOC/, images in Data/CLS-LOC/
    {train/<wnid>,val,test}. --data ILSVRC read as an ImageFolder made one class of every image, the validation
    and test images pretrained on; now it names the folder to pass. Annotations/CLS-LOC has train/ and val/ too,
    of XML files: not a candidate."""
    kaggle = tmp_path / "ILSVRC"
    top = kaggle / "Data" / "CLS-LOC"
    for part in ("train/n01440764/n01440764_1.JPEG", "train/n01443537/n01443537_1.JPEG", "val/v_1.JPEG",
                 "test/t_1.JPEG"):
        _save(top / part)
    for part in ("Annotations/CLS-LOC/train/n01440764/n01440764_1.xml", "Annotations/CLS-LOC/val/v_1.xml",
                 "ImageSets/CLS-LOC/train_cls.txt"):
        (kaggle / part).parent.mkdir(parents=True, exist_ok=True)
        (kaggle / part).write_text("x")
    for root in (tmp_path, kaggle, kaggle / "Data"):
        for split in ("train", "val"):
            with pytest.raises(DatasetError) as err:
                scan_images(root, split=split, verify=False)
            assert str(err.value) == (f"{root} has no {split}/ folder; read as a folder of images it would give "
                                      f"every image below it, those of {top}/val/ too: pass --data {top}")
    assert scan_images(top, verify=False).classes == ["n01440764", "n01443537"]
    assert len(scan_images(top / "train", verify=False).samples) == 2  # a bare train/ is no wrapper
    for other in ("B", "C"):  # two datasets side by side: which one is meant is not ours to guess
        for part in ("train/x/1.jpg", "val/x/2.jpg"):
            _save(tmp_path / "two" / other / part)
    assert len(scan_images(tmp_path / "two", verify=False).samples) == 4
    for name in "abcdefghi":  # nine class folders, one with a train/ and val/ inside: class folders, not opened
        _save(tmp_path / "classes" / name / "1.jpg")
    _save(tmp_path / "classes" / "a" / "train" / "2.jpg")
    _save(tmp_path / "classes" / "a" / "val" / "3.jpg")
    assert len(scan_images(tmp_path / "classes", verify=False).classes) == 9


def test_flat_folder_gets_label_minus_one(tmp_path: Path) -> None:
    for name in ("b.png", "a.jpg", "c.webp"):
        _save(tmp_path / name)
    found = scan_images(tmp_path, verify=False)
    assert found.classes == []
    assert found.samples == [(str(tmp_path / n), -1) for n in ("a.jpg", "b.png", "c.webp")]


def test_corrupt_files_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "empty.jpg").write_bytes(b"")
    (tmp_path / "text.png").write_text("this is not a png\n")
    good = _save(tmp_path / "good.jpg")
    found = scan_images(tmp_path, workers=4)
    assert found.samples == [(str(good), -1)]
    reasons = dict(found.skipped)
    assert set(reasons) == {str(tmp_path / "empty.jpg"), str(tmp_path / "text.png")}
    assert reasons[str(tmp_path / "empty.jpg")] == "empty file"
    assert reasons[str(tmp_path / "text.png")] == "cannot identify image"
    line = warn_skipped(found.skipped)
    assert line is not None and "\n" not in line
    assert line.startswith("skipped 2 unreadable images:")
    assert "empty.jpg (empty file)" in line and "text.png (cannot identify image)" in line
    unchecked = scan_images(tmp_path, verify=False)
    assert len(unchecked.samples) == 3 and unchecked.skipped == []


def test_verification_with_many_files_keeps_order(tmp_path: Path) -> None:
    names = [f"{i:03d}.png" for i in range(150)]
    for i, name in enumerate(names):
        if i % 50 == 7:
            (tmp_path / name).write_bytes(b"")
        else:
            _save(tmp_path / name, size=(2, 2))
    found = scan_images(tmp_path, workers=4)
    expected = [str(tmp_path / n) for i, n in enumerate(names) if i % 50 != 7]
    assert [p for p, _ in found.samples] == expected
    assert [p for p, _ in found.skipped] == [str(tmp_path / names[i]) for i in (7, 57, 107)]


def test_all_files_unreadable_raises(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"")
    (tmp_path / "b.jpg").write_bytes(b"junk")
    with pytest.raises(DatasetError, match="could be read") as info:
        scan_images(tmp_path)
    assert str(tmp_path) in str(info.value) and "\n" not in str(info.value)


def test_warn_skipped_limit() -> None:
    assert warn_skipped([]) is None
    skipped = [(f"/d/{i}.jpg", "empty file") for i in range(8)]
    line = warn_skipped(skipped, limit=3)
    assert line == (
        "skipped 8 unreadable images: 0.jpg (empty file), 1.jpg (empty file), 2.jpg (empty file), and 5 more"
    )
    assert warn_skipped(skipped[:1]) == "skipped 1 unreadable image: 0.jpg (empty file)"


@pytest.mark.parametrize("kind", ["missing", "file", "empty", "no_images"])
def test_bad_roots_raise_one_line_errors(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "dataset"
    if kind == "file":
        root.write_text("x")
    elif kind == "empty":
        root.mkdir()
    elif kind == "no_images":
        (root / "train" / "cls").mkdir(parents=True)
        (root / "train" / "cls" / "readme.txt").write_text("x")
    with pytest.raises(DatasetError) as info:
        scan_images(root)
    message = str(info.value)
    assert str(root) in message
    assert "\n" not in message
    if kind in ("empty", "no_images"):
        assert message.startswith("no images found under")


@pytest.mark.parametrize(
    ("mode", "suffix", "colour"),
    [
        ("L", ".png", 128),
        ("P", ".png", 3),
        ("RGBA", ".png", (10, 20, 30, 0)),
        ("LA", ".png", (90, 128)),
        ("CMYK", ".jpg", (0, 128, 255, 0)),
        ("I;16", ".png", 40000),
    ],
)
def test_load_rgb_modes(tmp_path: Path, mode: str, suffix: str, colour: object) -> None:
    path = _save(tmp_path / f"img{suffix}", size=(7, 5), colour=colour, mode=mode)
    img = load_rgb(path)
    assert img.mode == "RGB"
    assert img.size == (7, 5)


def test_load_rgb_scales_16_bit(tmp_path: Path) -> None:
    path = _save(tmp_path / "deep.png", size=(4, 4), colour=65535, mode="I;16")
    assert load_rgb(path).getpixel((0, 0)) == (255, 255, 255)
    path = _save(tmp_path / "mid.png", size=(4, 4), colour=32896, mode="I;16")
    assert load_rgb(path).getpixel((0, 0)) == (128, 128, 128)


def test_rgba_alpha_is_dropped(tmp_path: Path) -> None:
    path = _save(tmp_path / "a.png", size=(3, 3), colour=(10, 20, 30, 0), mode="RGBA")
    assert load_rgb(path).getpixel((1, 1)) == (10, 20, 30)


def test_truncated_jpeg_is_replaced_by_next_sample(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(data, "_warned_paths", set())
    first = _save(tmp_path / "a.jpg", colour=(255, 0, 0))
    broken = _noise_jpeg(tmp_path / "b.jpg")
    payload = broken.read_bytes()
    broken.write_bytes(payload[: len(payload) // 2])
    third = _save(tmp_path / "c.jpg", colour=(0, 0, 255))
    found = scan_images(tmp_path)
    assert [p for p, _ in found.samples] == [str(first), str(broken), str(third)]  # header check passes it

    dataset = ImageDataset(found.samples, _identity)
    assert len(dataset) == 3
    with caplog.at_level(logging.WARNING, logger="moco.data"):
        img, label, index = dataset[1]
        again = dataset[1]
    assert index == 1 and label == -1 and again[2] == 1
    assert img.getpixel((0, 0))[2] > 200  # the next sample (blue) stood in
    warnings = [r for r in caplog.records if r.name == "moco.data" and r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per file
    assert str(broken) in warnings[0].getMessage()

    img, _, index = dataset[0]
    assert index == 0 and img.getpixel((0, 0))[0] > 200


def test_dataset_wraps_around_and_gives_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data, "_warned_paths", set())
    good = _save(tmp_path / "a.png", colour=(0, 255, 0))
    bad = tmp_path / "b.png"
    bad.write_bytes(b"garbage")
    dataset = ImageDataset([(str(good), 0), (str(bad), 1)], _identity)
    img, label, index = dataset[1]
    assert (label, index) == (0, 1) and img.getpixel((0, 0)) == (0, 255, 0)
    with pytest.raises(IndexError):
        dataset[2]
    hopeless = ImageDataset([(str(bad), 0)], _identity)
    with pytest.raises(DatasetError):
        hopeless[0]


def test_names_with_spaces_and_unicode(tmp_path: Path) -> None:
    names = ["with space.jpg", "ünïcødé_图像.png", "emoji 🐱.jpeg"]
    for name in names:
        _save(tmp_path / "klasse é" / name, colour=(1, 2, 3))
    found = scan_images(tmp_path)
    assert found.classes == ["klasse é"]
    assert sorted(Path(p).name for p, _ in found.samples) == sorted(names)
    dataset = ImageDataset(found.samples, _identity)
    for i in range(len(dataset)):
        img, label, index = dataset[i]
        assert img.mode == "RGB" and label == 0 and index == i


def test_huge_jpegs_are_decoded_at_reduced_scale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory stays bounded: a JPEG beyond MAX_DECODE_SIDE is decoded by DCT scaling, not at full size."""
    from moco_core.data import image_files

    monkeypatch.setattr(image_files, "MAX_DECODE_SIDE", 64)  # a 'huge' image of 512 x 300 px, to keep the test small
    path = tmp_path / "big.jpg"
    Image.new("RGB", (512, 300), (200, 30, 60)).save(path, quality=90)
    img = data.load_rgb(path)
    assert img.mode == "RGB" and 64 <= max(img.size) <= 128 and img.size[0] * 300 == img.size[1] * 512  # 1/4 scale
    assert abs(np.asarray(img).astype(int).mean(axis=(0, 1)) - (200, 30, 60)).max() < 6
    small = tmp_path / "small.jpg"
    Image.new("RGB", (60, 40), (10, 20, 30)).save(small)
    assert data.load_rgb(small).size == (60, 40)  # below the limit: untouched
    png = tmp_path / "big.png"
    Image.new("RGB", (512, 300)).save(png)
    assert data.load_rgb(png).size == (512, 300)  # only JPEG can be scaled while decoding


def test_decode_failures_are_reported_once_per_epoch_with_counts(shapes_root: Path, tmp_path: Path) -> None:
    """The issue's case: a truncated JPEG that passes the header check logged a line per occurrence (per worker,
    per epoch). Now: one warning line an epoch, each file once with how often it was met."""
    import shutil
    import subprocess
    import sys

    root = tmp_path / "data"
    shutil.copytree(shapes_root / "train", root / "train")
    first = sorted((root / "train").iterdir())[0]
    sorted(first.iterdir())[0].unlink()  # 32 images with the broken one: every batch of 8 takes each, each epoch
    broken = first / "broken.jpg"
    _noise_jpeg(broken, 96)
    broken.write_bytes(broken.read_bytes()[: broken.stat().st_size // 2])
    assert data.check_image(str(broken)) is None  # the header check lets it through
    out = tmp_path / "run"
    sets = ["model.arch=resnet18", "optim.batch_size=8", "model.bn_groups=2", "model.queue_size=16",
            "optim.epochs=2", "augment.crop_size=32", "run.knn_every=0", "data.pipeline=pil"]
    args = [sys.executable, "-m", "cli", "pretrain", "-c", "embedded", "--data", str(root), "--output-dir", str(out),
            "--workers", "2", "--quiet", *[a for v in sets for a in ("--set", v)]]
    root_dir = Path(__file__).resolve().parents[3]
    done = subprocess.run(args, cwd=root_dir, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(root_dir)})
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "did not decode" in line or "cannot decode" in line]
    assert [w.split(":")[1] for w in warnings] == [" epoch 1", " epoch 2"], done.stderr
    for w in warnings:  # met once an epoch, by whichever worker loaded it
        assert "1 image passed the header check but did not decode" in w and "broken.jpg (" in w and w.endswith(
            "x1"), w
    assert not list(out.glob(".undecodable*"))


def test_decode_failures_counts_and_forgets(tmp_path: Path) -> None:
    failures = data.DecodeFailures(tmp_path / ".undecodable")
    assert failures.report("epoch 1") is None
    for path, reason in [("/d/a.jpg", "broken data"), ("/d/b.jpg", "x"), ("/d/a.jpg", "broken data")]:
        failures.note(path, reason)
    assert failures.report("epoch 1") == ("epoch 1: 2 images passed the header check but did not decode; the next "
                                          "image stood in each time: a.jpg (broken data) x2, b.jpg (x) x1")
    assert failures.report("epoch 2") is None and list(tmp_path.iterdir()) == []


def _shared_scan(root: str, out_dir: str) -> None:
    """One process of test_a_run_reads_each_header_once: a shared scan, counting the files it opened."""
    import json

    import torch

    opened = []
    check = data.check_image
    data.check_image = lambda path: opened.append(path) or check(path)
    torch.distributed.init_process_group("gloo")
    try:
        found = scan_images(root, workers=2, shared=True)
        rank = torch.distributed.get_rank()
        Path(out_dir, f"{rank}.json").write_text(json.dumps(
            {"samples": found.samples, "skipped": found.skipped, "opened": opened}))
    finally:
        torch.distributed.destroy_process_group()


def test_a_run_reads_each_header_once_over_its_processes(tmp_path: Path) -> None:
    """Every rank of a run scans the same root; each opens every world-th file and all learn the others' skips,
    so they keep the same samples (the sampler indexes them) as one process would, at half the reads each."""
    import json

    from moco_core import distributed

    root = tmp_path / "data"
    for c in range(3):
        for i in range(30):
            _save(root / "train" / f"c{c}" / f"{i:02d}.png")
    for name in ("c0/07.png", "c1/12.png", "c2/29.png"):  # in both ranks' shares
        (root / "train" / name).write_bytes(b"\x89PNG broken")
    alone = scan_images(root, workers=2)
    assert len(alone.skipped) == 3 and len(alone.samples) == 87
    distributed.launch(2, _shared_scan, str(root), str(tmp_path))
    results = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(2)]
    for res in results:
        assert [tuple(s) for s in res["samples"]] == alone.samples
        assert [tuple(s) for s in res["skipped"]] == alone.skipped
    paths = sorted(str(p) for p in (root / "train").rglob("*.png"))
    assert [sorted(res["opened"]) for res in results] == [sorted(paths[0::2]), sorted(paths[1::2])]


def test_a_long_header_check_is_announced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(12):
        _save(tmp_path / "train" / "a" / f"{i}.png")
    scan_images(tmp_path, workers=2)
    assert capsys.readouterr().err == ""  # a small set: nothing
    monkeypatch.setattr(data, "_ANNOUNCE_VERIFY", 10)
    scan_images(tmp_path, workers=2)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "checking that 12 image files open..."
    assert err[1].startswith("checked in ") and err[1].endswith(" s") and len(err) == 2
    scan_images(tmp_path, workers=2, verify=False)
    assert capsys.readouterr().err == ""
