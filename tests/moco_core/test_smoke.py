"""MOCO_SMOKE=1 (moco_core/smoke.py, README): lengths shortened as --set would, sizes shrunk where the command did
not choose them, small embedded sets of their own, and records that say they came from a smoke run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from classification.linear import LinearConfig
from moco_core import smoke
from moco_core.config import load_config
from moco_core.pretrain_config import PretrainConfig
from transfer.detection.config import TransferConfig


@pytest.fixture
def smoking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCO_SMOKE", "1")


@pytest.mark.parametrize("value, on", [("1", True), ("yes", True), ("0", False), ("", False), (" ", False)])
def test_the_switch(value: str, on: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCO_SMOKE", value)
    assert smoke.enabled() is on
    assert smoke.marker() == ({"smoke": True} if on else {})


def test_off_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MOCO_SMOKE", raising=False)
    cfg = load_config(PretrainConfig, "moco_v1_200ep", ["data.path=x"])
    assert (cfg.optim.epochs, cfg.model.arch, cfg.optim.batch_size) == (200, "resnet50", 256)


def test_pretraining_is_shortened_and_shrunk(smoking: None) -> None:
    v1 = load_config(PretrainConfig, "moco_v1_200ep", ["data.path=x"])
    # 200 epochs -> 2; the step schedule's milestones 120 and 160 keep their fraction: 1.2 -> 1, 1.6 -> 2 (the end)
    assert (v1.optim.epochs, v1.optim.milestones) == (2, (1,))
    assert (v1.model.arch, v1.model.queue_size, v1.model.bn_groups, v1.optim.batch_size, v1.augment.crop_size,
            v1.data.workers) == ("resnet18", 32, 2, 8, 32, 0)
    embedded = load_config(PretrainConfig, "embedded")
    assert embedded.optim.epochs == 1  # 100 -> 1
    # epoch intervals shortened with it: a snapshot every 20 of 100 epochs -> every epoch; 0 (off) stays off
    kept = load_config(PretrainConfig, "embedded", ["run.keep_every=20", "run.knn_every=250"])
    assert (kept.run.keep_every, kept.run.knn_every) == (1, 3)
    assert load_config(PretrainConfig, "embedded", ["run.keep_every=0"]).run.keep_every == 0
    # what the command chose stays; its length is shortened all the same (300 -> 3, 101 -> 2)
    chosen = load_config(PretrainConfig, "embedded", ["model.arch=resnet50", "optim.epochs=300",
                                                      "optim.batch_size=16"])
    assert (chosen.model.arch, chosen.optim.epochs, chosen.optim.batch_size) == ("resnet50", 3, 16)
    assert load_config(PretrainConfig, "embedded", ["optim.epochs=101"]).optim.epochs == 2
    flagged = load_config(PretrainConfig, "embedded", flags={"data": {"workers": 3}})
    assert flagged.data.workers == 3


def test_supervised_baseline(smoking: None) -> None:
    cfg = load_config(PretrainConfig, "supervised_embedded")  # 15 epochs -> 1
    assert (cfg.method, cfg.optim.epochs, cfg.optim.batch_size) == ("supervised", 1, 8)


def test_linear_and_detection(smoking: None) -> None:
    linear = load_config(LinearConfig, "lincls_embedded")
    assert (linear.optim.epochs, linear.optim.milestones, linear.data.crop_size) == (1, (), 32)
    voc = load_config(TransferConfig, "voc_R50_C4_24k", ["data.path=x"])
    assert (voc.solver.iterations, voc.solver.warmup_iters, voc.input.max_size) == (2, 1, 64)
    assert voc.schedule.endswith(", 2 it")  # the report does not match it to the paper's 24k schedule
    assert all(s < 2 for s in voc.solver.steps)
    fpn = load_config(TransferConfig, "coco_R50_FPN_1x", ["data.path=x"])
    assert fpn.detector.anchor_sizes == (8, 16, 32, 64, 128)
    c4 = load_config(TransferConfig, "coco_R50_C4_1x", ["data.path=x"])
    assert c4.detector.anchor_sizes == TransferConfig().detector.anchor_sizes


def test_small_embedded_sets_of_their_own(smoking: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from moco_core.run.runtime import resolve_data
    from transfer.detection.datasets import dataset_root

    monkeypatch.setenv("MOCO_DATA_HOME", str(tmp_path))
    root = resolve_data("embedded")
    assert len(list((root / "train").glob("*/*.png"))) == 32 and len(list((root / "val").glob("*/*.png"))) == 32
    monkeypatch.delenv("MOCO_SMOKE")
    assert not resolve_data("embedded").exists() or resolve_data("embedded") != root  # the full set is elsewhere
    monkeypatch.setenv("MOCO_SMOKE", "1")
    voc = dataset_root(load_config(TransferConfig, "voc_embedded"))
    names = (voc / "VOC2007/ImageSets/Main/trainval.txt").read_text().split()
    assert len(names) == 16


def test_records_and_run_json_say_smoke(smoking: None, tmp_path: Path) -> None:
    from moco_core.model.backbone import BackboneInfo
    from moco_core.run.records import write_record
    from moco_core.run.rundir import environment

    assert environment()["smoke"] is True
    info = BackboneInfo(source="random", format="random", arch="resnet18", sha256=None, pretrain={})
    path = write_record(tmp_path / "result.json", task="linear", protocol="linear", metrics={"top1": 1.0},
                        backbone=info, dataset={}, config={})
    assert json.loads(path.read_text())["smoke"] is True
