"""classification/engine.py: linear classification, fine-tuning and the head grid stopped by SIGTERM after an
epoch's checkpoint and resumed end where a run never stopped does (issue 56), through the one epoch driver."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from classification.finetune import FINETUNE_LAST, finetune, load_finetune_config
from classification.frozen.grid import GRID_LAST, grid_eval
from classification.frozen.grid_config import GridConfig, GridHeadsConfig, GridOptimConfig, GridRunConfig
from classification.linear import LINEAR_LAST, linear_eval, load_linear_config
from classification.splits import LinearDataConfig
from moco_core import checkpoint
from moco_core.config import ConfigError, replace
from moco_core.run import preemption
from moco_core.run.preemption import Stopped, Stopper

EPOCHS, STOP_AFTER = 2, 1
SMALL = ["data.workers=0", "run.log_every=1", "data.crop_size=16", "data.resize=16", "run.device=cpu"]


def _linear(data: Path, out: Path) -> Any:
    cfg = load_linear_config("lincls_embedded", [f"optim.epochs={EPOCHS}", "optim.batch_size=16",
                                                 "optim.milestones=[1]", *SMALL])
    return replace(cfg, arch="resnet18", data={"path": str(data)}, run={"output_dir": str(out)})


def _finetune(data: Path, out: Path) -> Any:
    cfg = load_finetune_config("finetune_embedded", [f"optim.epochs={EPOCHS}", "optim.batch_size=16",
                                                      "optim.milestones=[1]", *SMALL])
    return replace(cfg, arch="resnet18", data={"path": str(data)}, run={"output_dir": str(out)})


def _grid(data: Path, out: Path) -> Any:
    return GridConfig(arch="resnet18", grid=GridHeadsConfig(lrs=(1e-3, 1.0)),
                      optim=GridOptimConfig(batch_size=16, epochs=EPOCHS),
                      data=LinearDataConfig(path=str(data), crop_size=16, resize=16, workers=0),
                      run=GridRunConfig(output_dir=str(out), device="cpu"))


# (the run, its config, its epoch checkpoint, the refusal of a fresh start over a stopped run, of a resume past the end)
PROTOCOLS: dict[str, tuple[Callable[..., Path], Callable[[Path, Path], Any], str, str, str]] = {
    "linear": (linear_eval, _linear, LINEAR_LAST, r"already holds an unfinished linear evaluation \(linear_last",
               "the 2 epochs of .* are done already; raise it to extend the evaluation"),
    "finetune": (finetune, _finetune, FINETUNE_LAST, r"already holds an unfinished fine-tuning \(finetune_last",
                 "the 2 epochs of .* are done already; raise it to extend the fine-tuning"),
    "grid": (grid_eval, _grid, GRID_LAST, r"already holds an unfinished grid evaluation \(grid_last",
             r"holds a finished grid evaluation \(its cosine schedule ended at epoch 2\)"),
}


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two checkpoints' contents differ: tensors bit for bit, containers item by item."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        same = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
        return [] if same else [where]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{where} keys"]
        return [d for k in a for d in _differences(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [where]


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in line.items() if k != "time"} for line in lines]


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_a_run_stopped_after_an_epoch_and_resumed_ends_as_one_never_stopped(
        name: str, shapes_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM once epoch 1 of 2 is checkpointed (what a scheduler's stop leaves; a fresh start over it is
    refused), then ``resume``: the epoch checkpoint (weights, BN statistics, optimizer state, history, RNG), the
    record and metrics.jsonl equal an uninterrupted run's (CPU, no loader workers: every draw comes from the
    restored RNG); a second resume, with no epoch left, is refused."""
    evaluate, config, last, unfinished, finished = PROTOCOLS[name]
    straight = json.loads(evaluate(config(shapes_root, tmp_path / "straight"), "random",
                                   show_progress=False).read_text())
    save_last = checkpoint.save_last

    def save_then_stop(obj: dict[str, Any], path: Path) -> None:
        save_last(obj, path)
        if obj["epoch"] == STOP_AFTER:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(checkpoint, "save_last", save_then_stop)
    monkeypatch.setattr(preemption, "last_stop", None)  # the Stopper's note of the signal ends with this test
    with pytest.raises(Stopped), Stopper():
        evaluate(config(shapes_root, tmp_path / "stopped"), "random", show_progress=False)
    monkeypatch.setattr(checkpoint, "save_last", save_last)
    stopped = tmp_path / "stopped"
    assert checkpoint.load(stopped / last)["epoch"] == STOP_AFTER and not (stopped / "result.json").exists()
    with pytest.raises(ConfigError, match=unfinished):
        evaluate(config(shapes_root, stopped), "random", show_progress=False)

    resumed = json.loads(evaluate(config(shapes_root, stopped), "random", show_progress=False,
                                  resume=True).read_text())
    assert [h["epoch"] for h in resumed["history"]] == list(range(EPOCHS))
    for key in ("history", "metrics", "grid"):
        assert resumed.get(key) == straight.get(key), key
    a, b = (checkpoint.load(run_dir / last) for run_dir in (tmp_path / "straight", stopped))
    assert a["epoch"] == b["epoch"] == EPOCHS and a["optimizer"]["state"]  # momentum buffers to compare
    assert _differences({k: v for k, v in a.items() if k != "config"},
                        {k: v for k, v in b.items() if k != "config"}) == []
    assert _metrics(stopped) == _metrics(tmp_path / "straight")
    with pytest.raises(ConfigError, match=finished):
        evaluate(config(shapes_root, stopped), "random", show_progress=False, resume=True)
