"""Dataset names to files: detectron2's standard sets and one's own (a VOC-style devkit, a COCO-format file)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from moco_core.config import ConfigError
from moco_core.data.data import DatasetError
from reports.published import PublishedRow, matching
from reports.summary import Setting
from tests.layouts import custom_detection_layout
from transfer.detection.config import load_transfer_config
from transfer.detection.datasets import DatasetSpec, load_data, parse_dataset

runner = CliRunner()
DEVKIT_TRAIN, DEVKIT_VAL = "MyDevkit/ImageSets/Main/train.txt", "MyDevkit/ImageSets/Main/val.txt"


@pytest.mark.parametrize(("name", "task", "spec"), [
    ("voc_2007_trainval", "voc", DatasetSpec("voc_2007_trainval", Path("VOC2007"), "trainval", year="2007")),
    ("coco_2017_val", "coco", DatasetSpec("coco_2017_val", Path("coco/val2017"), "val2017",
                                          Path("coco/annotations/instances_val2017.json"), "2017")),
    ("kit/ImageSets/Main/fold_1.txt", "voc", DatasetSpec("kit/ImageSets/Main/fold_1.txt", Path("kit"), "fold_1")),
    ("/abs/kit/ImageSets/Main/a.txt", "voc", DatasetSpec("/abs/kit/ImageSets/Main/a.txt", Path("/abs/kit"), "a")),
    ("ann/train.json:img", "coco", DatasetSpec("ann/train.json:img", Path("img"), "train", Path("ann/train.json"))),
    ("/a/b.json:/c/d", "coco", DatasetSpec("/a/b.json:/c/d", Path("/c/d"), "b", Path("/a/b.json"))),
])
def test_names_and_paths_become_the_files_of_a_dataset(name: str, task: str, spec: DatasetSpec) -> None:
    assert parse_dataset(name, task) == spec


@pytest.mark.parametrize(("name", "task", "message"), [
    ("coco_2017_train", "voc", "is a coco dataset, not a voc one"),
    ("voc_2007", "voc", "neither voc_<year>_<split>"),
    ("kit/train.txt", "voc", "DEVKIT/ImageSets/Main/<split>.txt"),  # not in ImageSets/Main
    ("ann/train.json", "coco", "name its image folder after a colon"),
    ("images", "coco", "ANNOTATIONS.json:IMAGE_DIR"),
])
def test_other_names_are_one_line_errors_naming_the_accepted_forms(name: str, task: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_transfer_config(task, None, [], {"data": {"path": "/d", "train": [name]}})


@pytest.fixture(scope="module")
def mine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return custom_detection_layout(tmp_path_factory.mktemp("mine"))


def _xml_names(root: Path) -> list[str]:
    return sorted({m for xml in (root / "MyDevkit" / "Annotations").glob("*.xml")
                   for m in re.findall(r"<name>([^<]+)</name>", xml.read_text())})


def test_a_custom_devkit_takes_its_class_names_from_its_annotations_or_from_data_classes(mine: Path) -> None:
    flags = {"data": {"path": str(mine), "train": [DEVKIT_TRAIN], "test": DEVKIT_VAL}}
    data = load_data(load_transfer_config("voc", "voc_embedded", [], flags))
    names = _xml_names(mine)
    assert data.class_names == names and len(names) == 8
    assert data.name == "custom: MyDevkit/train -> MyDevkit/val"
    assert len(data.train) == 12 and len(data.test) == 6
    first = data.test[0]
    xml = (mine / "MyDevkit" / "Annotations" / f"{first['image_id']}.xml").read_text()
    assert names[first["annotations"][0]["category_id"]] == re.findall(r"<name>([^<]+)</name>", xml)[0]
    reverse = {"data": {**flags["data"], "classes": names[::-1]}}
    again = load_data(load_transfer_config("voc", "voc_embedded", [], reverse))
    assert again.class_names == names[::-1]  # the given order is the label order
    assert [a["category_id"] for a in again.test[0]["annotations"]] == [
        7 - a["category_id"] for a in first["annotations"]]
    with pytest.raises(DatasetError, match="unknown class name"):
        load_data(load_transfer_config("voc", "voc_embedded", [], {"data": {**flags["data"], "classes": names[1:]}}))


def test_a_custom_coco_file_reads_its_images_under_the_named_folder(mine: Path) -> None:
    flags = {"data": {"path": str(mine), "train": ["annotations/train.json:images"],
                      "test": "annotations/val.json:images"}}
    data = load_data(load_transfer_config("coco", "coco_embedded", [], flags))
    assert data.name == "custom: train.json -> val.json" and data.coco_gt == mine / "annotations" / "val.json"
    assert all(Path(d["file_name"]).is_relative_to(mine / "images" / "train") for d in data.train)
    assert len(data.test) == 6 and all(Path(d["file_name"]).is_file() for d in data.test)
    missing = {"data": {**flags["data"], "test": "annotations/val.json:pictures"}}
    with pytest.raises(DatasetError, match=r"pictures not found \(a COCO-format file and its image folder"):
        load_data(load_transfer_config("coco", "coco_embedded", [], missing))


def test_no_dataset_reads_outside_its_own_folder(mine: Path, tmp_path: Path) -> None:
    doc = json.loads((mine / "annotations" / "val.json").read_text())
    doc["images"][2]["file_name"] = "../../../etc/passwd"
    (tmp_path / "escape.json").write_text(json.dumps(doc))
    flags = {"data": {"path": str(mine), "train": ["annotations/train.json:images"],
                      "test": f"{tmp_path / 'escape.json'}:images"}}
    with pytest.raises(DatasetError, match=r"file_name '\.\./\.\./\.\./etc/passwd' leaves .* \(names are relative"):
        load_data(load_transfer_config("coco", "coco_embedded", [], flags))
    split = mine / "MyDevkit" / "ImageSets" / "Main" / "escape.txt"
    split.write_text("../../../etc/passwd\n")
    flags = {"data": {"path": str(mine), "train": [DEVKIT_TRAIN], "test": str(split.relative_to(mine))}}
    try:
        with pytest.raises(DatasetError, match=r"image id '\.\./\.\./\.\./etc/passwd' leaves "):
            load_data(load_transfer_config("voc", "voc_embedded", [], flags))
    finally:
        split.unlink()


def test_the_cli_takes_custom_sets_and_classes_and_checks_them() -> None:
    result = runner.invoke(app, ["eval", "voc", "--print-config", "--data", "/d", "--train", DEVKIT_TRAIN,
                                 "--train", "voc_2012_trainval", "--test", DEVKIT_VAL, "--classes", "cat, dog"])
    assert result.exit_code == 0, result.output
    assert f"- {DEVKIT_TRAIN}\n  - voc_2012_trainval\n" in result.output
    assert f"test: {DEVKIT_VAL}" in result.output and "classes:\n  - cat\n  - dog\n" in result.output
    result = runner.invoke(app, ["eval", "voc", "--print-config", "--data", "/d", "--classes", "cat,cat"])
    assert result.exit_code == 2 and "data.classes: need distinct, non-empty names" in result.output
    result = runner.invoke(app, ["eval", "coco", "--print-config", "--data", "/d", "--set", "data.classes=[a]"])
    assert result.exit_code == 2 and "data.classes: VOC-style devkits only" in result.output
    result = runner.invoke(app, ["eval", "coco", "--print-config", "--data", "/d", "--test", "val.json"])
    assert result.exit_code == 2 and "name its image folder after a colon" in result.output


def test_published_rows_are_never_shown_beside_custom_datasets() -> None:
    row = PublishedRow(task="voc07+12_det", backbone="R50-C4", schedule="24k", pretrain_data="IN-1M",
                       pretrain="MoCo", source="paper", checked="primary", values={"AP50": 81.5})
    paper = Setting("voc", "voc", "VOC07+12", "/data/voc", "detectron2", "R50-C4", "24k")
    assert matching(paper, {"resnet50"}, [row]) == [row]
    own = Setting("voc", "voc", "custom: MyDevkit/train -> MyDevkit/val", "/data/voc", "detectron2", "R50-C4", "24k")
    assert matching(own, {"resnet50"}, [row]) == []


def test_a_dataset_one_folder_off_is_found_and_named(tmp_path_factory: pytest.TempPathFactory) -> None:
    """VOC's archives unpack to VOCdevkit/VOC2007; --data may name the dataset's own folder (VOC2007/, or COCO
    under another name). The error says where it is and what --data to pass; a real miss says nothing more."""
    from tests.layouts import detection_layout

    top = tmp_path_factory.mktemp("datasets")
    devkit = detection_layout(top / "VOCdevkit")
    (devkit / "coco").rename(top / "COCO2017")

    def error(task: str, path: Path) -> str:
        with pytest.raises(DatasetError) as err:
            load_data(load_transfer_config(task, f"{task}_embedded", [], {"data": {"path": str(path)}}))
        return str(err.value)

    assert error("voc", top).endswith(f"not found: {top / 'VOC2007'} (expected a year directory such as VOC2007/ "
                                      f"under --data); it is under {devkit}: pass --data {devkit}")
    assert error("voc", devkit / "VOC2007").endswith(f"; it is under {devkit}: pass --data {devkit}")
    assert error("coco", top / "COCO2017").endswith(
        f"; {top / 'COCO2017'} looks like the coco/ folder itself: --data takes the folder that holds it, as "
        f"coco/ (a symbolic link of that name will do)")
    assert error("coco", top).endswith(f"coco/train2017/ under {top})")  # nothing one level off: no hint
    (top / "coco").symlink_to(top / "COCO2017")
    (top / "VOC2007").symlink_to(devkit / "VOC2007")
    (top / "VOC2012").symlink_to(devkit / "VOC2012")
    for task in ("voc", "coco"):  # as the hints say
        assert load_data(load_transfer_config(task, f"{task}_embedded", [], {"data": {"path": str(top)}})).train
