"""The grid and few-shot keep how they were asked for, as every evaluation does (issue 51 after issue 48): the record's
``invocation`` (so the report's random-init suggestion runs the grid or few-shot again), and a grid stopped by
SIGTERM prints the command that continues it, with --grid and --resume, which does."""

from __future__ import annotations

import json
import os
import shlex
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from classification.frozen import grid as grid_module
from cli import app
from tests.layouts import imagenet_layout

SMALL = ["--set", "optim.batch_size=8", "--set", "data.crop_size=32", "--set", "data.resize=36",
         "--set", "grid.lrs=[0.001,1.0]"]


def test_a_stopped_grid_prints_the_command_that_continues_it_and_that_continues(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MOCO_SMOKE", raising=False)
    monkeypatch.chdir(tmp_path)
    data = imagenet_layout(tmp_path / "imagenet", train_per_class=6)
    out = tmp_path / "grid"
    train_epoch = grid_module._train_epoch

    def stopped_in_the_second(cfg, run, epoch, *args):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202
        if epoch == 1:  # a scheduler's stop, once the first epoch's checkpoint is written
            os.kill(os.getpid(), signal.SIGTERM)
        return train_epoch(cfg, run, epoch, *args)

    monkeypatch.setattr(grid_module, "_train_epoch", stopped_in_the_second)
    runner = CliRunner()
    first = runner.invoke(app, ["eval", "linear", "random", "--arch", "resnet18", "--grid", "--data", str(data),
                                "--device", "cpu", "--workers", "0", "--quiet", *SMALL, "--set", "optim.epochs=2",
                                "--output-dir", str(out)])
    assert first.exit_code == 143, first.output
    line = first.output.strip().splitlines()[-1]
    prefix = "stopped by SIGTERM during the evaluation; continue with: "
    assert line.startswith(prefix), line
    command = line.removeprefix(prefix)
    assert command == shlex.join(["moco", "eval", "linear", "random", "--arch", "resnet18", "--data", str(data),
                                  "--device", "cpu", "--workers", "0", "--grid", *SMALL, "--set", "optim.epochs=2",
                                  "--output-dir", str(out), "--resume"])
    assert not (out / "result.json").exists() and (out / grid_module.GRID_LAST).exists()
    monkeypatch.setattr(grid_module, "_train_epoch", train_epoch)
    continued = runner.invoke(app, shlex.split(command)[1:])
    assert continued.exit_code == 0, continued.output
    record = json.loads((out / "result.json").read_text())
    assert record["protocol"] == "linear-grid" and record["invocation"]["options"]["grid"] is True
    assert record["invocation"]["command"] == "eval linear" and not record.get("smoke")


def test_a_few_shot_record_keeps_its_invocation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MOCO_SMOKE", raising=False)
    monkeypatch.chdir(tmp_path)
    data = imagenet_layout(tmp_path / "imagenet", train_per_class=6)
    done = CliRunner().invoke(app, ["eval", "linear", "random", "--arch", "resnet18", "--shots", "1, 2",
                                    "--tries", "2", "--data", str(data), "--device", "cpu", "--workers", "0",
                                    "--quiet", *SMALL[:6], "--output-dir", str(tmp_path / "fs")])
    assert done.exit_code == 0, done.output
    record = json.loads((tmp_path / "fs" / "result.json").read_text())
    assert record["task"] == "fewshot"
    # the k as parsed (no spaces): a value moco_core.commands accepts back
    assert record["invocation"]["options"] == {"arch": "resnet18", "data": str(data), "device": "cpu",
                                               "workers": 0, "shots": "1,2", "tries": 2}
