"""``moco eval semseg`` end to end on the real layouts' fixtures: the record, resume, the run-directory lock, the
shared fine-tuning, one-line errors, the presets (the paper's numbers) and the record in ``moco report``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from cli import app
from moco_core.config import ConfigError
from tests.transfer.segmentation.layouts import cityscapes_layout, custom_segmentation_layout, voc_segmentation_layout
from tests.transfer.test_convert_mocov3 import v3_checkpoint
from transfer.segmentation.config import load_semseg_config

runner = CliRunner()
TINY = ["solver.batch_size=2", "solver.iterations=2", "solver.steps=[1]", "input.crop_size=32", "head.channels=8",
        "data.workers=0", "run.log_every=1"]


def sets(*overrides: str) -> list[str]:
    return [arg for value in overrides for arg in ("--set", value)]


def error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert lines[0].startswith("error: ")
    return lines[0]


def run(*args: str) -> dict:
    result = runner.invoke(app, ["eval", "semseg", *args, "--quiet"])
    assert result.exit_code == 0, result.output
    (path,) = re.findall(r"^result: (.+)$", result.output, re.M)
    return json.loads(Path(path.strip()).read_text())


def test_presets_are_the_papers() -> None:
    voc = load_semseg_config(None, [], {"data": {"path": "/d"}})  # no --config: the paper's VOC12 run (A.5)
    assert (voc.solver.lr, voc.solver.batch_size, voc.solver.weight_decay) == (0.003, 16, 1e-4)
    assert (voc.solver.iterations, voc.solver.steps, voc.input.crop_size) == (30000, (21000, 27000), 513)
    assert (voc.head.output_stride, voc.head.channels, voc.head.dilation, voc.head.convs) == (16, 256, 6, 2)
    assert voc.input.scale_range == (0.5, 2.0) and voc.data.train == "voc_2012_sem_seg_train_aug"
    city = load_semseg_config("semseg_cityscapes", [], {"data": {"path": "/d"}})
    assert (city.solver.lr, city.solver.iterations, city.solver.steps, city.input.crop_size) == (
        0.01, 90000, (63000, 81000), 769)
    assert (city.data.train, city.data.test, city.schedule) == (
        "cityscapes_fine_sem_seg_train", "cityscapes_fine_sem_seg_val", "90k")


def test_voc_run_record_resume_and_lock(tmp_path: Path) -> None:
    root = voc_segmentation_layout(tmp_path / "datasets")
    out = str(tmp_path / "run")
    record = run("random", "--arch", "resnet18", "--data", str(root), "--output-dir", out, *sets(*TINY))
    assert record["task"] == "semseg" and record["engine"] == "torchvision"
    assert record["config"]["model"] == "R18 FCN-style os16" and record["config"]["schedule"] == "30k, 2 it"
    assert record["dataset"]["name"] == "VOC12" and record["dataset"]["classes"] == 21
    assert 0 <= record["metrics"]["mIoU"] <= 100 and 0 <= record["metrics"]["pixel_acc"] <= 100
    assert [h["iteration"] for h in record["history"]] == [1, 2]
    again = runner.invoke(app, ["eval", "semseg", "random", "--arch", "resnet18", "--data", str(root),
                                "--output-dir", out, *sets(*TINY)])
    assert again.exit_code == 2 and "pass --resume" in error_line(again.output)
    longer = run("random", "--arch", "resnet18", "--data", str(root), "--output-dir", out, "--resume",
                 *sets(*TINY, "solver.iterations=3"))
    assert [h["iteration"] for h in longer["history"]] == [3]  # continued from the checkpoint of iteration 2
    assert torch.load(Path(out) / "checkpoint_last.pth.tar", weights_only=False)["iteration"] == 3


def test_cityscapes_label_ids_and_own_folders(tmp_path: Path) -> None:
    root = cityscapes_layout(custom_segmentation_layout(tmp_path / "datasets"), train_ids=False)
    record = run("random", "--arch", "resnet18", "-c", "semseg_cityscapes", "--data", str(root), "--output-dir",
                 str(tmp_path / "city"), *sets(*TINY))
    assert record["dataset"]["name"] == "Cityscapes" and record["dataset"]["classes"] == 19
    assert record["dataset"]["train_images"] == 2 and record["config"]["schedule"] == "90k, 2 it"
    own = run("random", "--arch", "resnet18", "--data", str(root), "--train", "images/train:labels/train",
              "--test", "images/val:labels/val", "--classes", "bg,a,b", "--ignore-index", "255", "--output-dir",
              str(tmp_path / "own"), *sets(*TINY))
    assert own["dataset"]["name"] == "custom: images/train:labels/train" and own["dataset"]["class_names"] == [
        "bg", "a", "b"]
    assert set(own["metrics"]["per_class_IoU"]) == {"bg", "a", "b"}


@pytest.mark.parametrize(("args", "message"), [
    (["random", "--data", "/d"], "'random' needs the ResNet"),
    (["random", "--arch", "resnet18"], "data.path: not set"),
    (["random", "--arch", "resnet18", "--data", "/d", "--set", "input.scale_range=[2,1]"], "input.scale_range"),
    (["random", "--arch", "resnet18", "--data", "/d", "--set", "solver.steps=[40000]"], "solver.steps"),
    (["random", "--arch", "resnet18", "--data", "/d", "--classes", "a,b", "--ignore-index", "1"],
     "data.ignore_index"),
    (["random", "--arch", "resnet18", "-c", "voc_embedded"], "detector: unknown key"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["eval", "semseg", *args])
    assert result.exit_code == 2 and message in error_line(result.output)


def test_missing_data_and_a_vit_are_one_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["eval", "semseg", "random", "--arch", "resnet18", "--data", str(tmp_path),
                                 "--output-dir", str(tmp_path / "a")])
    assert result.exit_code == 2 and "train_aug.txt: no such split list" in error_line(result.output)
    pytest.importorskip("timm")
    vit, _ = v3_checkpoint(tmp_path, "vit_nano_p4")  # a MoCo v3 ViT: refused in one line
    result = runner.invoke(app, ["eval", "semseg", str(vit), "--data", str(tmp_path), "--output-dir",
                                 str(tmp_path / "b")])
    assert result.exit_code == 2 and "holds a ViT (vit_nano_p4), not a ResNet" in error_line(result.output)


def test_print_config_and_a_wrong_preset() -> None:
    result = runner.invoke(app, ["eval", "semseg", "-c", "semseg_embedded", "--print-config"])
    assert result.exit_code == 0 and "path: embedded" in result.output and "crop_size: 96" in result.output
    with pytest.raises(ConfigError, match="unknown config preset"):
        load_semseg_config("semseg_nope", [])


def test_trials_give_each_semseg_run_its_seed(tmp_path: Path) -> None:
    from cluster.trials import trial_commands

    first, second = trial_commands(["eval", "semseg", "runs/moco/seed_{seed}", "-c", "semseg_embedded",
                                    "--output-dir", str(tmp_path / "semseg")], 2, 0)
    assert first.argv() == ["eval", "semseg", "runs/moco/seed_0", "-c", "semseg_embedded", "--seed", "0",
                            "--output-dir", str(tmp_path / "semseg" / "seed_0")]
    assert second.run_dir == tmp_path / "semseg" / "seed_1"
