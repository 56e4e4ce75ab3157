"""classification/frozen/grid.py: the grid's run on real layouts (record, held-out split, robustness columns,
resume, sanity check), honest selection, and its one-line errors through the CLI."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from classification.frozen import grid as grid_module
from classification.frozen.grid import grid_eval
from classification.frozen.grid_config import (
    GridConfig,
    GridHeadsConfig,
    GridOptimConfig,
    GridRunConfig,
    RobustnessConfig,
    SelectConfig,
    load_grid_config,
)
from classification.splits import LinearDataConfig
from moco_core import checkpoint, smoke
from moco_core.config import ConfigError
from tests.layouts import WNIDS, imagenet_layout, robustness_layout

ROOT = Path(__file__).resolve().parents[3]


def _config(data: Path, out: Path, *, lrs: tuple[float, ...] = (1e-3, 1.0, 30.0), epochs: int = 1, **sections: object
            ) -> GridConfig:
    cfg = GridConfig(arch="resnet18", grid=GridHeadsConfig(lrs=lrs), optim=GridOptimConfig(batch_size=8, epochs=epochs),
                     data=LinearDataConfig(path=str(data), crop_size=32, resize=36, workers=0),
                     run=GridRunConfig(output_dir=str(out), device="cpu"))
    return GridConfig(**{**cfg.__dict__, **sections})


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("grid")
    root = imagenet_layout(base / "imagenet", train_per_class=6, ilsvrc_val_names=True)
    return root, robustness_layout(base / "sets", root)


def test_the_record_names_every_head_the_split_and_the_robustness_sets(imagenet: tuple[Path, Path],
                                                                       tmp_path: Path) -> None:
    data, sets = imagenet
    cfg = _config(data, tmp_path / "run", robustness=RobustnessConfig(root=str(sets)))
    path = grid_eval(cfg, "random", show_progress=False)
    record = json.loads(path.read_text())
    assert record["task"] == "linear" and record["protocol"] == "linear-grid" and record["sanity_check"] == "passed"
    assert [h["head"] for h in record["grid"]] == ["layer4 lr 0.001", "layer4 lr 1", "layer4 lr 30"]
    assert [h["lr_scaled"] for h in record["grid"]] == [1e-3 * 8 / 256, 8 / 256, 30 * 8 / 256]
    selection = record["selection"]
    split = selection["split"]  # 6 a class (+ the gray and CMYK extras in classes 1 and 2; the truncated one skipped)
    assert selection["on"] == "held-out train split" and split["images"] == 4 and split["of"] == 26
    held = (tmp_path / "run" / "holdout.txt").read_text()
    assert hashlib.sha256(held.encode()).hexdigest() == split["sha256"] and held.count("\n") == 3
    assert all(line.startswith("train/") for line in held.splitlines())
    chosen = next(h for h in record["grid"] if h["head"] == selection["chosen"])
    assert chosen["holdout_top1"] == max(h["holdout_top1"] for h in record["grid"])
    assert record["metrics"]["top1"] == chosen["val_top1"] and record["metrics"]["top5"] == chosen["val_top5"]
    robustness = record["robustness"]
    assert list(robustness) == ["imagenet-v2", "imagenet-a", "imagenet-r", "imagenet-sketch", "imagenet-real"]
    assert [robustness[n]["images"] for n in robustness] == [12, 4, 9, 8, 7]
    assert robustness["imagenet-a"]["classes"] == 2 and robustness["imagenet-r"]["classes"] == 3
    for name, metric in (("imagenet-v2", "imagenet_v2_top1"), ("imagenet-real", "imagenet_real_top1")):
        assert record["metrics"][metric] == robustness[name]["top1"]
    assert record["dataset"]["train_images"] == 26 and record["config"]["grid"]["lrs"] == [1e-3, 1.0, 30.0]
    final = checkpoint.load(tmp_path / "run" / "grid_final.pth.tar")
    assert final["chosen"] == selection["chosen"] and final["classes"] == list(WNIDS)


def _bright_and_dark(root: Path) -> Path:
    """Two classes told apart by brightness: in train/ class a is dark and b bright, in val/ the other way round,
    so a head that learns train's rule is wrong on every val image."""
    rng = np.random.default_rng(0)
    for split, count in (("train", 12), ("val", 4)):
        for name, dark in (("a", split == "train"), ("b", split == "val")):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                level = 40 if dark else 215
                pixels = np.clip(level + rng.normal(0, 12, (32, 32, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{name}_{i}.png")
    return root


def test_choosing_on_val_would_pick_another_head_than_the_held_out_split(tmp_path: Path) -> None:
    """Selection honesty: val disagrees with train, so the head the held-out split picks (one that learned train)
    is wrong on val, while the heads that barely moved from their random start are not; choosing on val picks one
    of those, and reports more."""
    data = _bright_and_dark(tmp_path / "data")
    lrs = (1e-7, 2e-7, 5e-7, 10.0)
    honest = json.loads(grid_eval(_config(data, tmp_path / "honest", lrs=lrs, epochs=2), "random",
                                  show_progress=False).read_text())
    assert honest["selection"]["chosen"] == "layer4 lr 10"
    assert honest["selection"]["best_on_val"] != "layer4 lr 10"
    assert honest["metrics"]["top1"] == 0.0  # the held-out images agree with train; val does not
    on_val = json.loads(grid_eval(_config(data, tmp_path / "on_val", lrs=lrs, epochs=2,
                                          select=SelectConfig(split="val")), "random", show_progress=False).read_text())
    assert on_val["protocol"] == "linear-grid-selected-on-val"
    assert on_val["selection"]["chosen"] == honest["selection"]["best_on_val"]
    assert on_val["selection"]["on"] == "val (the reported set)" and "holdout_top1" not in on_val["grid"][0]
    assert on_val["metrics"]["top1"] > honest["metrics"]["top1"]
    assert "chosen on val, the reported set" in on_val["note"]


def test_resume_continues_bit_identically(imagenet: tuple[Path, Path], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    data, _ = imagenet
    whole = _config(data, tmp_path / "whole", epochs=2)
    grid_eval(whole, "random", show_progress=False)
    cut = _config(data, tmp_path / "cut", epochs=2)
    train_epoch = grid_module._train_epoch

    def stop_after_the_first(cfg, run, epoch, *args):  # type: ignore[no-untyped-def]
        if epoch == 1:
            raise KeyboardInterrupt
        return train_epoch(cfg, run, epoch, *args)

    monkeypatch.setattr(grid_module, "_train_epoch", stop_after_the_first)
    with pytest.raises(KeyboardInterrupt):
        grid_eval(cut, "random", show_progress=False)
    assert checkpoint.load(tmp_path / "cut" / grid_module.GRID_LAST)["epoch"] == 1
    monkeypatch.setattr(grid_module, "_train_epoch", train_epoch)
    with pytest.raises(ConfigError, match="already holds an unfinished grid evaluation"):
        grid_eval(cut, "random", show_progress=False)
    kept = {name: (tmp_path / "cut" / name).read_bytes() for name in ("run.json", "holdout.txt")}
    with pytest.raises(ConfigError, match="--resume: grid differs"):
        grid_eval(_config(data, tmp_path / "cut", epochs=2, lrs=(1.0,)), "random", show_progress=False, resume=True)
    assert {name: (tmp_path / "cut" / name).read_bytes() for name in kept} == kept  # a refused resume left them
    monkeypatch.setenv("MOCO_SMOKE", "1")  # a smoke run never carries on a real one
    with pytest.raises(smoke.ModeMismatch, match="holds a real run"):
        grid_eval(cut, "random", show_progress=False, resume=True)
    monkeypatch.delenv("MOCO_SMOKE")
    grid_eval(cut, "random", show_progress=False, resume=True)
    heads = [checkpoint.load(tmp_path / d / "grid_final.pth.tar")["heads"] for d in ("whole", "cut")]
    assert heads[0].keys() == heads[1].keys() and all(torch.equal(heads[0][k], heads[1][k]) for k in heads[0])
    records = [json.loads((tmp_path / d / "result.json").read_text()) for d in ("whole", "cut")]
    assert records[0]["grid"] == records[1]["grid"] and records[0]["history"] == records[1]["history"]
    with pytest.raises(ConfigError, match="holds a finished grid evaluation"):
        grid_eval(cut, "random", show_progress=False, resume=True)


def test_vit_heads_read_dinov2s_four_features(imagenet: tuple[Path, Path], tmp_path: Path) -> None:
    pytest.importorskip("timm")
    data, _ = imagenet
    cfg = _config(data, tmp_path / "vit", lrs=(0.1, 1.0))
    cfg = GridConfig(**{**cfg.__dict__, "arch": "vit_nano_p4", "data": LinearDataConfig(
        path=str(data), crop_size=32, resize=32, workers=0)})
    record = json.loads(grid_eval(cfg, "random", show_progress=False).read_text())
    assert [h["head"] for h in record["grid"]] == [f"{t} lr {lr}" for t in ("cls", "cls+avg", "cls4", "cls4+avg")
                                                   for lr in ("0.1", "1")]
    assert record["sanity_check"] == "passed" and record["backbone"]["arch"] == "vit_nano_p4"


def test_config_checks_are_one_line(imagenet: tuple[Path, Path], tmp_path: Path) -> None:
    data, _ = imagenet
    for override, message in (("grid.lrs=[]", "grid.lrs: must name at least one"),
                              ("grid.lrs=[0.1, -1]", "grid.lrs: each must be finite and > 0"),
                              ("grid.taps=[pool5]", "grid.taps: unknown feature 'pool5'"),
                              ("select.holdout_fraction=0.9", "select.holdout_fraction: must be in (0, 0.5]"),
                              ("robustness.sets=[imagenet-c]", "robustness.sets: known sets"),
                              ("select.split=test", "select.split: expected one of")):
        with pytest.raises(ConfigError) as err:
            load_grid_config("lincls_grid_embedded", [override])
        assert message in str(err.value) and "\n" not in str(err.value)
    cfg = _config(data, tmp_path / "taps", lrs=(1.0,))
    cfg = GridConfig(**{**cfg.__dict__, "grid": GridHeadsConfig(lrs=(1.0,), taps=("cls4",))})
    with pytest.raises(ConfigError, match="grid.taps: unknown ResNet feature 'cls4'"):
        grid_eval(cfg, "random", show_progress=False)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", "eval", "linear", *args], cwd=cwd, capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                                          "MOCO_DATA_HOME": str(cwd / "data")})


def test_the_cli_routes_grid_presets_and_refuses_mixed_options(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from cli import app

    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    shown = runner.invoke(app, ["eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_grid_embedded",
                                "--print-config"])
    assert shown.exit_code == 0, shown.output
    assert "grid:\n  lrs:" in shown.output and "split: holdout" in shown.output and "batch_size: 32" in shown.output
    flagged = runner.invoke(app, ["eval", "linear", "random", "--arch", "resnet18", "--grid", "--data", "embedded",
                                  "--print-config"])
    assert "batch_size: 1024" in flagged.output and "- 0.1\n" in flagged.output  # lincls_grid's: DINOv2's lrs
    for args, message in ((("--grid", "--cached-features"), "error: --cached-features: the grid and few-shot read"),
                          (("--robustness", str(tmp_path / "none"), "-c", "lincls_grid_embedded"),
                           "error: robustness.root: "),
                          (("-c", "lincls_grid_embedded", "--set", "grid.lrs=[0]"), "error: grid.lrs: each must")):
        done = runner.invoke(app, ["eval", "linear", "random", "--arch", "resnet18", "--data", "embedded", *args])
        assert done.exit_code == 2 and done.output.startswith(message), done.output
        assert done.output.count("\n") == 1
    done = _cli("random", "--arch", "resnet18", "--grid", "--cached-features", "--data", "embedded", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: --cached-features")
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_two_processes_train_one_grid(imagenet: tuple[Path, Path], tmp_path: Path) -> None:
    """--nproc 2: the heads in DDP, each rank a shard of every batch and of every evaluation, counts summed."""
    data, sets = imagenet
    done = _cli("random", "--arch", "resnet18", "--grid", "--data", str(data), "--robustness", str(sets),
                "--nproc", "2", "--output-dir", str(tmp_path / "run"), "--set", "optim.batch_size=8",
                "--set", "optim.epochs=1", "--set", "data.crop_size=32", "--set", "data.resize=36",
                "--set", "grid.lrs=[0.1,1]", "--workers", "0", "--quiet", "--device", "cpu", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    starts = json.loads((tmp_path / "run" / "run.json").read_text())["starts"]
    assert starts[-1]["world_size"] == 2 and record["sanity_check"] == "passed"
    assert record["robustness"]["imagenet-v2"]["images"] == 12 and len(record["grid"]) == 2


def test_the_grid_help_states_each_presets_learning_rates_as_they_are() -> None:
    """Issue 57: --help called the grid's lrs DINOv2's, while lincls_grid_embedded sweeps 0.01 to 100. Each preset's
    range is in the help text as the preset holds it."""
    from typer.testing import CliRunner

    from cli import app

    text = " ".join(CliRunner().invoke(app, ["eval", "linear", "--help"], env={"COLUMNS": "1000"}).output.split())
    for preset in ("lincls_grid", "lincls_grid_embedded", "lincls_grid_32px"):
        lrs = load_grid_config(preset, [], flags={"data": {"path": "embedded"}}).grid.lrs
        low, high = (f"{v:g}".replace("e-0", "e-") for v in (min(lrs), max(lrs)))
        assert f"{preset}'s" in text and f"{low} to {high}" in text, (preset, low, high)
