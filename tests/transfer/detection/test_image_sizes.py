"""Images are checked against their annotations before anything trains: missing, unreadable or resized files
are one DatasetError that counts them and names the first few; an EXIF quarter turn is taken into account."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from cli import app
from moco_core.data.data import DatasetError
from transfer.detection.datasets import check_image_sizes
from transfer.detection.voc import VOC_CLASSES

from .test_voc import annotation_xml, make_voc, obj_xml


def record(path: Path, width: int, height: int) -> dict:
    return {"file_name": str(path), "width": width, "height": height, "annotations": []}


def jpeg(path: Path, width: int, height: int, orientation: int | None = None) -> Path:
    image = Image.new("RGB", (width, height), (120, 30, 200))
    exif = Image.Exif()
    if orientation is not None:
        exif[0x0112] = orientation
    image.save(path, format="JPEG", exif=exif.tobytes())
    return path


def test_matching_images_pass(tmp_path: Path) -> None:
    records = [record(jpeg(tmp_path / f"{i}.jpg", 40 + i, 30), 40 + i, 30) for i in range(5)]
    check_image_sizes(records, workers=2)  # no error


def test_an_exif_quarter_turn_swaps_the_sides(tmp_path: Path) -> None:
    stored = jpeg(tmp_path / "rotated.jpg", 40, 30, orientation=6)  # stored 40x30, shown 30x40
    check_image_sizes([record(stored, 30, 40)])
    with pytest.raises(DatasetError, match=r"rotated.jpg is 30x40 but its annotation says 40x30"):
        check_image_sizes([record(stored, 40, 30)])


def test_resized_missing_and_unreadable_images_are_counted_and_named(tmp_path: Path) -> None:
    good = [record(jpeg(tmp_path / f"ok{i}.jpg", 32, 32), 32, 32) for i in range(3)]
    resized = record(jpeg(tmp_path / "small.jpg", 16, 12), 32, 24)
    missing = record(tmp_path / "gone.jpg", 32, 32)
    (tmp_path / "text.jpg").write_text("not an image")
    unreadable = record(tmp_path / "text.jpg", 32, 32)
    with pytest.raises(DatasetError) as err:
        check_image_sizes([*good, resized, missing, unreadable])
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("3 of 6 images do not match their annotations: ")
    assert "small.jpg is 16x12 but its annotation says 32x24" in message
    assert f"{tmp_path / 'gone.jpg'} is missing" in message
    assert "text.jpg is not a readable image (UnidentifiedImageError)" in message


def test_a_decompression_bomb_is_refused_by_its_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = jpeg(tmp_path / "bomb.jpg", 64, 64)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # 64 x 64 is over twice this: PIL refuses the header
    with pytest.raises(DatasetError, match=r"bomb.jpg is not a readable image \(DecompressionBombError\)"):
        check_image_sizes([record(bomb, 64, 64)])


def test_only_the_first_three_are_named(tmp_path: Path) -> None:
    records = [record(jpeg(tmp_path / f"b{i}.jpg", 10, 10), 20, 20) for i in range(5)]
    with pytest.raises(DatasetError, match=r"^5 of 5 images .*; and 2 more$") as err:
        check_image_sizes(records)
    assert str(err.value).count("but its annotation says") == 3


def test_the_cli_stops_before_training_with_one_line(tmp_path: Path) -> None:
    """A VOC directory whose one image was resized after annotation: exit 2, the file named, no run written."""
    voc = tmp_path / "datasets" / "VOC2007"
    ids = ["000001", "000002"]
    make_voc(voc, {i: annotation_xml([obj_xml("dog", (3, 3, 30, 20))], width=48, height=32) for i in ids},
             {"trainval": ids, "test": ids}, jpegs=False)
    jpeg(voc / "JPEGImages" / "000001.jpg", 48, 32)
    jpeg(voc / "JPEGImages" / "000002.jpg", 24, 16)
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "eval", "voc", "random", "-c", "voc_embedded", "--data", str(tmp_path / "datasets"),
        "--set", f"data.classes=[{','.join(VOC_CLASSES)}]", "--engine", "torchvision", "--output-dir", str(out),
        "--quiet"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1
    assert "2 of 4 images do not match their annotations" in lines[0]  # trainval and test list the same image
    assert "000002.jpg is 24x16 but its annotation says 48x32" in lines[0]
    assert not (out / "metrics.jsonl").exists()
