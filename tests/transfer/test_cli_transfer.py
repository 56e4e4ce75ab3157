"""``moco eval voc`` and ``moco eval coco``: options, one-line errors with exit code 2, a COCO run into a report."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from transfer.detection.config import load_transfer_config
from transfer.embedded import ensure_coco

runner = CliRunner()
TINY = ["solver.batch_size=2", "solver.iterations=4", "solver.warmup_iters=2", "solver.steps=[3]",
        "solver.precise_bn_iters=1", "detector.pooler_resolution=4", "detector.roi_batch_size_per_image=8",
        "detector.rpn_post_nms_topk_train=32", "detector.rpn_post_nms_topk_test=8", "detector.detections_per_image=5",
        "detector.anchor_sizes=[8,16,32,64,128]", "input.min_size_train=[48]", "input.min_size_test=48",
        "input.max_size=64", "run.test_batch_size=8"]


def sets(*overrides: str) -> list[str]:
    return [arg for value in overrides for arg in ("--set", value)]


def error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert lines[0].startswith("error: ")
    return lines[0]


def test_help_shows_the_flags() -> None:
    for task in ("voc", "coco", "lvis", "cityscapes"):
        result = runner.invoke(app, ["eval", task, "--help"])
        assert result.exit_code == 0
        for flag in ("--config", "--set", "--engine", "--data", "--output-dir", "--device", "--seed",
                     "--resume", "--nproc"):
            assert flag in result.output


def test_print_config_resolves_presets_and_flags() -> None:
    result = runner.invoke(app, ["eval", "coco", "random", "--arch", "resnet50", "-c", "coco_R50_FPN_2x", "--data",
                                 "/d", "--engine", "torchvision", "--set", "solver.lr=0.01", "--seed", "3",
                                 "--print-config"])
    assert result.exit_code == 0, result.output
    assert "schedule: 2x" in result.output and "head: FPN" in result.output and "lr: 0.01" in result.output
    assert "engine: torchvision" in result.output and "seed: 3" in result.output and "path: /d" in result.output
    result = runner.invoke(app, ["eval", "voc", "-c", "voc_embedded", "--print-config"])  # no --weights needed
    assert result.exit_code == 0, result.output
    assert "path: embedded" in result.output
    paper = load_transfer_config("voc", None, [], {"data": {"path": "/d"}})  # no --config: the paper's VOC run
    assert (paper.detector.head, paper.solver.iterations, paper.solver.steps) == ("C4", 24000, (18000, 22000))
    assert (paper.solver.lr, paper.solver.batch_size, paper.input.min_size_test) == (0.02, 16, 800)


@pytest.mark.parametrize(("args", "message"), [
    (["eval", "voc", "random", "--set", "solver.itterations=5", "--data", "x"],
     "solver.itterations: unknown key"),
    (["eval", "voc", "-c", "voc_embedded"], "no weights: moco eval"),
    (["eval", "coco", "-c", "coco_embedded", "--engine", "torchvision"], "no weights: moco eval"),
    (["eval", "voc", "random", "-c", "coco_embedded"], "is for coco, not voc"),
    (["eval", "voc", "random", "-c", "voc_R50_C4_24k"], "data.path: not set"),
    (["eval", "voc", "random", "-c", "voc_embedded", "--set", "solver.lr=.inf"],
     "solver.lr: must be finite, got inf"),
    (["eval", "coco", "random", "--engine", "detectron9", "--data", "x"], "engine: expected one of"),
    (["eval", "lvis", "random", "-c", "coco_embedded"], "is for coco, not lvis"),
    (["eval", "lvis", "random", "--arch", "resnet18", "--data", "x", "--test", "lvis_v2_val"], "lvis_v0.5_<split>"),
    (["eval", "lvis", "random", "-c", "lvis_embedded", "--set", "data.repeat_threshold=1.5"],
     "data.repeat_threshold: must be in [0, 1)"),
    (["eval", "cityscapes", "random", "--arch", "resnet18", "--data", "x", "--test", "cityscapes_val"],
     "cityscapes_fine_instance_seg_<split>"),
    (["eval", "cityscapes", "random", "-c", "cityscapes_embedded", "--set", "detector.mask=false"],
     "detector.mask"),
])
def test_bad_config_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in error_line(result.output)


def test_bad_weights_and_missing_data_are_one_line_and_exit_2(tmp_path: Path) -> None:
    garbage = tmp_path / "weights.pth"
    garbage.write_bytes(b"\x00not a checkpoint")
    result = runner.invoke(app, ["eval", "voc", str(garbage), "-c", "voc_embedded", "--engine",
                                 "torchvision", "--quiet"])
    assert result.exit_code == 2
    assert str(garbage) in error_line(result.output)
    result = runner.invoke(app, ["eval", "voc", "random", "-c", "voc_embedded", "--data",
                                 str(tmp_path), "--engine", "torchvision", "--quiet"])
    assert result.exit_code == 2
    assert f"VOC directory not found: {tmp_path / 'VOC2007'}" in error_line(result.output)
    result = runner.invoke(app, ["eval", "coco", "random", "-c", "coco_embedded", "--data",
                                 str(tmp_path), "--engine", "torchvision", "--quiet"])
    assert result.exit_code == 2
    assert "coco/annotations/instances_train2017.json not found" in error_line(result.output)
    for task, missing in (("lvis", "lvis/lvis_v0.5_train.json not found"),
                          ("cityscapes", "cityscapes/leftImg8bit/train not found")):
        result = runner.invoke(app, ["eval", task, "random", "-c", f"{task}_embedded", "--data", str(tmp_path),
                                     "--engine", "torchvision", "--quiet", "--output-dir", str(tmp_path / task)])
        assert result.exit_code == 2
        assert missing in error_line(result.output)
    if importlib.util.find_spec("detectron2") is not None:
        return
    result = runner.invoke(app, ["eval", "voc", "random", "-c", "voc_embedded", "--engine",
                                 "detectron2", "--quiet"])
    assert result.exit_code == 2
    assert "detectron2 is not installed" in error_line(result.output)


def test_exit_code_through_a_real_process(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    args = ["eval", "coco", str(tmp_path / "absent.pth"), "-c", "coco_embedded", "--engine",
            "torchvision", "--quiet"]
    done = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2
    assert "absent.pth" in error_line(done.stderr)


def test_coco_run_through_the_cli_into_the_report(tmp_path: Path) -> None:
    data = ensure_coco(tmp_path / "data", train=8, val=4, size=64)
    out = tmp_path / "runs" / "coco_random"
    result = runner.invoke(app, ["eval", "coco", "random", "-c", "coco_embedded", "--data", str(data),
                                 "--output-dir", str(out), "--engine", "torchvision", "--workers", "0", "--quiet",
                                 *sets(*TINY)])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "result.json").read_text())
    assert record["engine"] == "torchvision" and record["config"]["model"] == "R18-C4"
    assert record["config"]["schedule"] == "embedded, 4 it" and record["dataset"]["name"] == "COCO train2017"
    for name in ("bbox_AP", "bbox_AP50", "bbox_AP75", "segm_AP", "segm_AP50", "segm_AP75"):
        assert 0 <= record["metrics"][name] <= 100
    assert record["metrics"]["bbox_APl"] is None  # no large object in 48-px images: null, not NaN
    json.loads((out / "result.json").read_text(), parse_constant=lambda name: pytest.fail(f"{name} in the record"))
    report = tmp_path / "report"
    result = runner.invoke(app, ["report", str(tmp_path / "runs"), "--out", str(report)])
    assert result.exit_code == 0, result.output
    text = (report / "report.md").read_text()
    # a 4-iteration run is not the embedded schedule
    assert ("COCO detection and instance segmentation (R18-C4, 4 iterations, not the embedded schedule's 200, "
            "torchvision)") in text
    assert "random init (R18)" in text


def test_auto_engine_dispatches_to_detectron2_when_installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import types

    import transfer.detection
    from transfer.detection import run

    calls = []
    fake = types.ModuleType("transfer.detection.detectron2_engine")
    fake.evaluate = lambda cfg, weights, **kwargs: calls.append((cfg.engine, weights, kwargs)) or tmp_path / "r.json"
    monkeypatch.setitem(sys.modules, "transfer.detection.detectron2_engine", fake)
    # and as the package's attribute: once an earlier test imported the real engine (detectron2 installed),
    # ``from transfer.detection import detectron2_engine`` finds it there before sys.modules
    monkeypatch.setattr(transfer.detection, "detectron2_engine", fake, raising=False)
    installed = {"detectron2", "transfer.detection.detectron2_engine"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name in installed else None)
    cfg = load_transfer_config("voc", "voc_embedded", [])
    assert cfg.engine == "auto" and run.resolve_engine("auto") == "detectron2"
    assert run.eval_voc(cfg, "w.pth", show_progress=False) == tmp_path / "r.json"
    assert calls == [("detectron2", "w.pth", {"show_progress": False, "extra": {}, "resume": False})]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert run.resolve_engine("auto") == "torchvision"
