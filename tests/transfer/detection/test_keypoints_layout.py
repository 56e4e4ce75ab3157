"""``moco eval keypoints`` on COCO's keypoint layout (detectron2's datasets/README: ``coco/annotations/
person_keypoints_{train,val}2017.json`` with ``coco/{train,val}2017/``) and on the embedded keypoint scenes:
file names, the reader, a run through the CLI into the report, and the one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli import app
from moco_core.data import shapes
from moco_core.data.data import DatasetError
from tests.layouts import KEYPOINT_IMAGE_IDS, add_coco_keypoints
from transfer.detection.config import load_transfer_config
from transfer.detection.datasets import load_data, parse_dataset
from transfer.detection.embedded_keypoints import KEYPOINT_NAMES, ensure_keypoints, extreme_points
from transfer.detection.keypoints import DEFAULT_SIGMA, load_keypoints

runner = CliRunner()
TINY = ["solver.batch_size=2", "solver.iterations=2", "solver.warmup_iters=1", "solver.steps=[1]",
        "solver.precise_bn_iters=1", "detector.roi_batch_size_per_image=8", "detector.rpn_post_nms_topk_train=32",
        "detector.rpn_post_nms_topk_test=8", "detector.detections_per_image=5", "detector.keypoint_pooler_resolution=4",
        "detector.keypoint_conv_dims=[8]", "detector.fpn_channels=16", "input.min_size_train=[48]",
        "input.min_size_test=48", "input.max_size=64", "run.test_batch_size=8"]


def sets(*overrides: str) -> list[str]:
    return [arg for value in overrides for arg in ("--set", value)]


@pytest.fixture(scope="module")
def coco_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("datasets")
    add_coco_keypoints(root / "coco", train=6, test=3)
    return root


def test_the_fixture_is_cocos_layout_down_to_the_file_names(coco_root: Path) -> None:
    coco = coco_root / "coco"
    assert sorted(p.name for p in (coco / "annotations").iterdir()) == [
        "person_keypoints_train2017.json", "person_keypoints_val2017.json"]
    doc = json.loads((coco / "annotations" / "person_keypoints_val2017.json").read_text())
    assert sorted(p.name for p in (coco / "val2017").iterdir()) == [f"{KEYPOINT_IMAGE_IDS + n:012d}.jpg"
                                                                    for n in (1, 2, 3)]
    assert [i["file_name"] for i in doc["images"]] == [f"{i['id']:012d}.jpg" for i in doc["images"]]
    assert [c["name"] for c in doc["categories"]] == list(shapes.CLASSES)
    assert all(c["keypoints"] == list(KEYPOINT_NAMES) and len(c["skeleton"]) == 4 for c in doc["categories"])
    assert parse_dataset("keypoints_coco_2017_train", "keypoints").annotations == Path(
        "coco/annotations/person_keypoints_train2017.json")


def test_standard_names_read_the_keypoint_files(coco_root: Path) -> None:
    cfg = load_transfer_config("keypoints", "keypoints_embedded", [], {"data": {"path": str(coco_root)}})
    data = load_data(cfg)
    assert data.name == "COCO train2017" and data.class_names == list(shapes.CLASSES)
    assert data.keypoints.names == KEYPOINT_NAMES and data.keypoints.flip_indices == (0, 3, 2, 1)
    assert np.allclose(data.oks_sigmas, DEFAULT_SIGMA)  # not COCO's person keypoints: the documented default
    assert all(len(a["keypoints"]) == 12 for d in data.train for a in d["annotations"])
    assert data.coco_gt.getCatIds() == list(range(1, 9))


def test_extreme_points_of_hand_worked_outlines() -> None:
    # a triangle with its apex up (y down): one vertex at each extreme but the level base, whose ends share bottom
    triangle = np.array([[10.0, 2.0], [2.0, 12.0], [18.0, 12.0]])
    assert extreme_points(triangle).tolist() == [[10.0, 2.0], [2.0, 12.0], [10.0, 12.0], [18.0, 12.0]]
    # a quadrilateral whose top side rises 0.5 px over its length (within 1 px of level: top is the side's middle);
    # left, bottom and right are single vertices
    quad = np.array([[5.0, 0.0], [0.0, 5.0], [5.0, 10.0], [10.0, 0.5]])
    top, left, bottom, right = extreme_points(quad).tolist()
    assert top == [7.5, 0.25] and left == [0.0, 5.0] and bottom == [5.0, 10.0] and right == [10.0, 0.5]


def test_embedded_keypoints_are_every_objects_extreme_points(tmp_path: Path) -> None:
    root = ensure_keypoints(tmp_path, train=6, val=2, size=96)
    assert json.loads((root / "coco" / "DONE").read_text())["version"] == "keypoints v4"
    dicts, names, _, points = load_keypoints(root / "coco/annotations/person_keypoints_train2017.json",
                                             root / "coco/train2017")
    objects = [a for d in dicts for a in d["annotations"]]
    assert names == list(shapes.CLASSES) and points.names == KEYPOINT_NAMES and len(objects) >= 12
    assert points.flip_indices == (0, 3, 2, 1)  # a flip exchanges left and right
    assert len({a["category_id"] for a in objects}) >= 4  # every class is annotated, not one among distractors
    for obj in objects:
        xy = np.asarray(obj["keypoints"]).reshape(4, 3)
        top, left, bottom, right = xy
        assert top[1] == xy[:, 1].min() and bottom[1] == xy[:, 1].max()
        assert left[0] == xy[:, 0].min() and right[0] == xy[:, 0].max()
        assert set(xy[:, 2]) <= {1, 2} and obj["num_keypoints"] == 4
        x0, y0, w, h = obj["bbox"]
        visible = xy[xy[:, 2] == 2]  # a visible point lies on the visible pixels' box, within a pixel
        assert ((visible[:, 0] >= x0 - 1.5) & (visible[:, 0] <= x0 + w + 1.5)).all()
        assert ((visible[:, 1] >= y0 - 1.5) & (visible[:, 1] <= y0 + h + 1.5)).all()


def test_run_through_the_cli_into_the_report(coco_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs" / "keypoints_random"
    result = runner.invoke(app, ["eval", "keypoints", "random", "-c", "keypoints_embedded", "--data", str(coco_root),
                                 "--output-dir", str(out), "--engine", "torchvision", "--workers", "0", "--quiet",
                                 *sets(*TINY)])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "result.json").read_text())
    assert record["task"] == "keypoints" and record["config"]["model"] == "R18-FPN"
    for name in ("keypoints_AP", "keypoints_AP50", "keypoints_AP75", "bbox_AP"):
        assert 0 <= record["metrics"][name] <= 100
    report = tmp_path / "report"
    result = runner.invoke(app, ["report", str(tmp_path / "runs"), "--out", str(report)])
    assert result.exit_code == 0, result.output
    text = (report / "report.md").read_text()
    assert "## COCO keypoint detection (R18-FPN, 2 iterations, not the embedded schedule's 200, torchvision)" in text
    assert "| APkp | APkp50 | APkp75 |" in " ".join(text.split()), text


@pytest.mark.parametrize(("args", "message"), [
    (["--train", "coco_2017_train"], "'coco_2017_train' is a coco dataset, not a keypoints one"),
    (["--set", "detector.head=C4", "--set", "detector.pooler_resolution=14"],
     "detector.head: Keypoint R-CNN is built on FPN"),
    (["--set", "detector.keypoint_oks_sigmas=[0.1,0.1]"], "2 sigmas for a set of 4 keypoints"),
])
def test_bad_input_is_one_line(coco_root: Path, tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["eval", "keypoints", "random", "-c", "keypoints_embedded", "--data", str(coco_root),
                                 "--output-dir", str(tmp_path / "out"), "--engine", "torchvision", "--quiet", *args])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and message in lines[0], result.output


def test_an_instances_file_given_as_keypoints_is_named(coco_root: Path, tmp_path: Path) -> None:
    from transfer.embedded import ensure_coco

    ensure_coco(tmp_path, train=2, val=2, size=64)
    with pytest.raises(DatasetError, match="person_keypoints_"):
        load_keypoints(tmp_path / "coco/annotations/instances_val2017.json", tmp_path / "coco/val2017")
