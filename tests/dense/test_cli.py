"""``moco eval linseg`` through typer's CliRunner: the fast mode end to end on the embedded ADE20K-layout scenes
(MOCO_SMOKE-sized), its record, the feature cache read back on a second run, and a broken layout in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from dense.config import LINSEG_LAMBDAS
from tests.dense.layouts import write_ade


@pytest.fixture
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {"MOCO_SMOKE": "1", "MOCO_DATA_HOME": str(tmp_path_factory.getbasetemp() / "data_home"),
            "OMP_NUM_THREADS": "1"}


def test_the_fast_mode_on_the_embedded_data_writes_its_record_and_reuses_its_features(
        tmp_path: Path, env: dict[str, str]) -> None:
    argv = ["eval", "linseg", "random", "--arch", "resnet18", "-c", "linseg_embedded", "--output-dir",
            str(tmp_path / "run")]
    first = CliRunner().invoke(app, argv, env=env)
    assert first.exit_code == 0, first.output
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    assert (record["task"], record["protocol"], record["smoke"]) == ("linseg", "linseg-fast", True)
    assert 0 <= record["metrics"]["mIoU"] <= 100 and 0 <= record["metrics"]["pixel_acc"] <= 100
    assert record["dataset"]["name"] == "embedded" and record["dataset"]["train_images"] == 16
    assert list(record["per_class_IoU"])[:2] == ["background", "circle"]
    chosen = record["selection"]
    assert chosen["lambda"] in LINSEG_LAMBDAS and len(chosen["curve"]) == len(LINSEG_LAMBDAS)
    assert chosen["images"] == 2 and chosen["of"] == 16  # 10% of train, rounded: never val
    assert record["knn"]["k"] == 20 and 0 <= record["knn"]["mIoU"] <= 100 and record["knn"]["bank"] > 0
    assert record["config"]["tap"] == "layer3" and record["config"]["labels_to_grid"] == "majority"
    assert record["invocation"]["command"] == "eval linseg" and not record["seconds"]["features_cached"]
    again = CliRunner().invoke(app, [*argv[:-1], str(tmp_path / "run")], env=env)
    assert again.exit_code == 0, again.output
    second = json.loads((tmp_path / "run" / "result.1.result.json").read_text())
    assert second["seconds"]["features_cached"] and math.isclose(second["metrics"]["mIoU"],
                                                                 record["metrics"]["mIoU"], abs_tol=1e-6)


@pytest.mark.parametrize(("damage", "message"), [
    ("no validation", "images/validation: no such folder (ADE20K as released"),
    ("a value past the classes", "ADE_train_00000001.png: label value 4 is beyond the 3 classes"),
    ("a huge size", "input.size: must be 32-4096 pixels, got 100000"),
])
def test_broken_layouts_and_values_end_in_one_line(tmp_path: Path, env: dict[str, str], damage: str,
                                                   message: str) -> None:
    root = write_ade(tmp_path / "data")
    overrides = ["--set", "data.num_classes=3"]
    if damage == "no validation":
        for folder in ("images", "annotations"):
            path = root / "ADEChallengeData2016" / folder / "validation"
            for f in path.iterdir():
                f.unlink()
            path.rmdir()
    elif damage == "a value past the classes":
        from PIL import Image

        Image.new("L", (40, 32), 4).save(root / "ADEChallengeData2016/annotations/training/ADE_train_00000001.png")
    else:
        overrides += ["--set", "input.size=100000"]
    result = CliRunner().invoke(app, ["eval", "linseg", "random", "--arch", "resnet18", "--data", str(root),
                                      "--output-dir", str(tmp_path / "run"), *overrides], env=env)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("error: ") and message in lines[-1], result.output
    assert "Traceback" not in result.output
