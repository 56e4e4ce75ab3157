"""Small custom data as a first-class case (issue 51, finding 4): presets named for what they fit (``*_32px``),
an evaluation that says which preset fits when its crops are far larger than the images, and a warning when a
schedule is too short to mean anything (``finetune_embedded --labels 10%`` ran 5 SGD steps in all, silently)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def moco(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("MOCO_SMOKE", None)
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


def test_without_a_preset_small_images_name_the_preset_that_fits(shapes_root: Path, tmp_path: Path) -> None:
    done = moco("eval", "linear", "random", "--arch", "resnet18", "--data", str(shapes_root), "--set",
                "optim.epochs=1", "--set", "optim.batch_size=8", "--set", "data.workers=0", "--output-dir",
                str(tmp_path / "linear"))
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "small" in line]
    assert line == ("warning: the images are small (48x48 px and smaller) for this evaluation's 224-px crops "
                    "(data.crop_size: each upscaled 5x, at a batch and schedule made for ImageNet); for images this "
                    "small use -c lincls_32px (MoCo v3 weights: -c lincls_mocov3_32px): crops of 32 px at batch 128")


def test_a_32px_preset_fits_and_a_handful_of_steps_is_said(shapes_root: Path, tmp_path: Path) -> None:
    done = moco("eval", "finetune", "random", "--arch", "resnet18", "-c", "finetune_32px", "--data",
                str(shapes_root), "--labels", "10%", "--set", "data.workers=0", "--output-dir", str(tmp_path / "ft"))
    assert done.returncode == 0, done.stderr
    assert "small" not in done.stderr  # the preset's 32-px crops fit 48-px images
    assert ("warning: this fine-tuning trains 5 optimiser steps in all, 5 epochs of 1 step (8 images at "
            "optim.batch_size 128): too short for its numbers to mean much (the schedule has no room to act); raise "
            "optim.epochs (at least 50)") in done.stderr


def test_what_a_short_schedule_says(monkeypatch: pytest.MonkeyPatch) -> None:
    from moco_core.run.schedule import short_schedule

    monkeypatch.delenv("MOCO_SMOKE", raising=False)
    # finetune_embedded --labels 10% of the embedded data: 200 images at batch 128, 1 step an epoch, 5 in all
    assert short_schedule("this fine-tuning", steps_per_epoch=1, epochs=5, images=200, batch_size=128) == (
        "warning: this fine-tuning trains 5 optimiser steps in all, 5 epochs of 1 step (200 images at "
        "optim.batch_size 128): too short for its numbers to mean much (the schedule has no room to act); "
        "--set optim.batch_size=20 gives 10 steps an epoch")
    # mocov3's warm-up of 3 epochs on 40 images at batch 128: 3 steps of warm-up... and 30 steps in all
    assert "trains 30 optimiser steps" in short_schedule("this pretraining", steps_per_epoch=1, epochs=30,
                                                         images=160, batch_size=128, warmup_epochs=3)
    assert "warms up over 2 steps only" in short_schedule("this pretraining", steps_per_epoch=2, epochs=100,
                                                          images=300, batch_size=128, warmup_epochs=1)
    assert short_schedule("x", steps_per_epoch=15, epochs=30, images=2000, batch_size=128, warmup_epochs=3) is None
    monkeypatch.setenv("MOCO_SMOKE", "1")  # short on purpose
    assert short_schedule("x", steps_per_epoch=1, epochs=1, images=8, batch_size=8) is None
