"""The shared fine-tuning engine (schedule, optimizer groups, precise BN) and a short detection run end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from moco_core.config import replace
from moco_core.data.shapes import CLASSES
from reports.records import load_records
from transfer import engine
from transfer.config import SolverConfig
from transfer.detection import data as detection_data
from transfer.detection.config import load_transfer_config
from transfer.detection.run import evaluate
from transfer.embedded import ensure_voc

# A C4 detector small enough for seconds on a CPU: 2 images of 48 px a batch, 4x4 RoIs, 16 RoIs per image.
TINY = ["solver.batch_size=2", "solver.lr=0.08", "solver.warmup_iters=5", "solver.precise_bn_iters=2",
        "detector.pooler_resolution=4", "detector.roi_batch_size_per_image=16", "detector.rpn_post_nms_topk_train=64",
        "detector.rpn_post_nms_topk_test=16", "detector.detections_per_image=10",
        "detector.anchor_sizes=[8,16,32,64,128]", "input.min_size_train=[48]", "input.min_size_test=48",
        "input.max_size=64", "data.workers=0", "run.log_every=1", "run.test_batch_size=8"]


def test_learning_rate_warmup_and_steps() -> None:
    cfg = SolverConfig(batch_size=8, lr=0.02, iterations=100, steps=(60, 80), warmup_iters=10, warmup_factor=0.001)
    base = 0.02 * 8 / 16  # linear scaling from the reference batch of 16
    assert engine.learning_rate(cfg, 0) == pytest.approx(base * 0.001)
    assert engine.learning_rate(cfg, 5) == pytest.approx(base * (0.001 * 0.5 + 0.5))
    assert engine.learning_rate(cfg, 10) == pytest.approx(base)
    assert engine.learning_rate(cfg, 59) == pytest.approx(base)
    assert engine.learning_rate(cfg, 60) == pytest.approx(base * 0.1)
    assert engine.learning_rate(cfg, 99) == pytest.approx(base * 0.01)


def test_bn_parameters_get_their_own_weight_decay() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Linear(4, 2))
    optimizer = engine.build_optimizer(model, SolverConfig(weight_decay=1e-4, weight_decay_norm=0.0))
    other, norm = optimizer.param_groups
    assert {id(p) for p in norm["params"]} == {id(model[1].weight), id(model[1].bias)}
    assert (other["weight_decay"], norm["weight_decay"], len(other["params"])) == (1e-4, 0.0, 4)
    assert other["momentum"] == 0.9


class _Normed(nn.Module):
    """A stand-in detector: BN over the stacked images; the targets are ignored."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(3)

    def forward(self, images: list[torch.Tensor], targets: list[dict]) -> dict[str, torch.Tensor]:
        return {"loss": self.bn(torch.stack(images)).sum()}


def test_precise_bn_is_the_plain_average_of_batch_statistics() -> None:
    torch.manual_seed(0)
    batches = [[torch.randn(3, 4, 4) * (k + 1) + k for _ in range(2)] for k in range(3)]
    model = _Normed()
    model.bn.momentum = 0.3
    stream = iter([(images, [{}, {}], [0, 1]) for images in batches])
    engine.precise_bn(model, stream, 3, device=torch.device("cpu"), amp=False)
    stacked = [torch.stack(images) for images in batches]
    mean = torch.stack([x.mean(dim=(0, 2, 3)) for x in stacked]).mean(0)
    var = torch.stack([x.var(dim=(0, 2, 3), unbiased=True) for x in stacked]).mean(0)
    assert torch.allclose(model.bn.running_mean, mean, atol=1e-5)
    assert torch.allclose(model.bn.running_var, var, atol=1e-5)
    assert model.bn.momentum == 0.3  # restored


@pytest.fixture(scope="module")
def tiny_voc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 trainval and 8 test embedded scenes of 64 px in the VOC layout."""
    return ensure_voc(tmp_path_factory.mktemp("voc"), trainval=24, test=8, size=64)


def test_short_voc_run_learns_and_writes_a_readable_record(tiny_voc: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    cfg = load_transfer_config("voc", "voc_embedded", [*TINY, "solver.iterations=24", "solver.steps=[20]",
                                                       f"data.classes={list(CLASSES)}"],
                               {"engine": "torchvision", "data": {"path": str(tiny_voc)},
                                "run": {"output_dir": str(tmp_path / "run")}})
    record_path = evaluate(cfg, "random", show_progress=False)
    record = json.loads(record_path.read_text())
    losses = [h["loss"] for h in record["history"]]
    assert len(losses) == 24
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5])  # the detector learns
    assert record["engine"] == "torchvision" and record["task"] == "voc"
    assert record["config"]["model"] == "R18-C4" and record["config"]["iterations"] == 24
    assert set(record["metrics"]["per_class_AP50"]) == set(CLASSES)
    assert record["dataset"]["train_images"] == 24 and record["dataset"]["test_images"] == 8
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 24 and {"loss_classifier", "loss_objectness", "lr"} <= set(json.loads(lines[-1]))
    saved = torch.load(tmp_path / "run" / "checkpoint_last.pth.tar", weights_only=True)
    assert saved["iteration"] == 24 and saved["format"] == "moco-transfer"
    records, skipped = load_records([str(tmp_path)])
    assert not skipped and len(records) == 1
    assert (records[0].task, records[0].engine, records[0].model) == ("voc", "torchvision", "R18-C4")
    assert records[0].pretraining.kind == "random"
    assert 0 <= records[0].metrics["AP50"] <= 100
    longer = replace(cfg, solver={"iterations": 26})  # resume: the last checkpoint, then two more iterations
    again = json.loads(evaluate(longer, "random", show_progress=False, resume=True).read_text())
    assert [h["iteration"] for h in again["history"]] == [25, 26]
    assert torch.load(tmp_path / "run" / "checkpoint_last.pth.tar", weights_only=True)["iteration"] == 26


def test_tensorboard_mirrors_the_fine_tunings_metrics_by_iteration(tiny_voc: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tests.moco_core.run.test_loggers import as_tensorboard_stores, expected_series, jsonl, tensorboard_scalars

    cfg = load_transfer_config("voc", "voc_embedded", [*TINY, "solver.iterations=3", "solver.steps=[2]",
                                                       "solver.warmup_iters=1", "solver.precise_bn_iters=0",
                                                       "run.loggers=[tensorboard]", f"data.classes={list(CLASSES)}"],
                               {"engine": "torchvision", "data": {"path": str(tiny_voc)},
                                "run": {"output_dir": str(tmp_path / "run")}})
    evaluate(cfg, "random", show_progress=False)
    lines = jsonl(tmp_path / "run")
    assert [line["step"] for line in lines] == [1, 2, 3]  # x is the iteration
    shown = tensorboard_scalars(tmp_path / "run" / "tensorboard")
    assert {"loss", "loss_classifier", "loss_box_reg", "loss_objectness", "loss_rpn_box_reg", "lr"} <= set(shown)
    assert shown == as_tensorboard_stores(expected_series(lines))


class _Crash(Exception):
    pass


def test_a_resumed_fine_tuning_sees_the_batches_an_uninterrupted_one_would(tiny_voc: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed after the checkpoint at iteration 8 (inside the second pass over 24 images in batches of 2), then
    --resume: the training images come in the order of a run never killed, from the batch it had reached (the old
    engine restarted the pass, or started one at the wrong point)."""
    from moco_core import checkpoint

    seen: list[int] = []
    real_getitem = detection_data.DetectionDataset.__getitem__

    def spy(self: Any, index: int) -> Any:
        if self.train:
            seen.append(index)
        return real_getitem(self, index)

    monkeypatch.setattr(detection_data.DetectionDataset, "__getitem__", spy)

    def config(out: str) -> Any:
        return load_transfer_config("voc", "voc_embedded", [*TINY, "solver.iterations=16", "solver.steps=[12]",
                                                           "solver.precise_bn_iters=0", "run.checkpoint_every=4",
                                                           f"data.classes={list(CLASSES)}"],
                                    {"engine": "torchvision", "data": {"path": str(tiny_voc)},
                                     "run": {"output_dir": str(tmp_path / out)}})

    evaluate(config("straight"), "random", show_progress=False)
    straight, seen[:] = list(seen), []
    assert len(straight) == 32  # 16 iterations of 2: a pass of 12 batches and 4 of the next
    real_save = checkpoint.save_atomic

    def save_then_crash(obj: dict, path: Path) -> None:
        real_save(obj, path)
        if obj.get("iteration") == 8:
            raise _Crash

    monkeypatch.setattr(checkpoint, "save_atomic", save_then_crash)
    with pytest.raises(_Crash):
        evaluate(config("killed"), "random", show_progress=False)
    assert seen == straight[:16]
    monkeypatch.setattr(checkpoint, "save_atomic", real_save)
    seen[:] = []
    evaluate(config("killed"), "random", show_progress=False, resume=True)
    assert seen == straight[16:]
    seen[:] = []
    cfg = config("late")  # a resume in the second pass
    evaluate(replace(cfg, solver={"iterations": 14}), "random", show_progress=False)
    seen[:] = []
    evaluate(cfg, "random", show_progress=False, resume=True)
    assert seen == straight[28:]
