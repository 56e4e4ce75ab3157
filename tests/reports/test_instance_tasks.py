"""LVIS and Cityscapes instance segmentation records in the report: their metrics and titles, and the paper's rows
beside a full-recipe detectron2 run only (never beside the embedded toy data)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reports.report import build_report
from tests.reports.conftest import SHA, WriteRecord, base_record


def _record(task: str, metrics: dict[str, float], *, seed: int, schedule: str, dataset: str, engine: str = "detectron2",
            method: str = "supervised", iterations: int = 180000) -> dict[str, Any]:
    backbone = {"source": f"/runs/{method}/checkpoint_last.pth.tar", "format": "moco-suite", "arch": "resnet50",
                "sha256": SHA, "pretrain": {"method": method, "epochs": 200, "arch": "resnet50",
                                            "config": {"data": {"path": "/imagenet"}}}}
    return base_record(task=task, protocol=task, metrics=metrics, backbone=backbone, engine=engine,
                       dataset={"path": "/datasets", "name": dataset, "classes": 1230},
                       config={"model": "R50-FPN", "schedule": schedule, "iterations": iterations,
                               "solver": {"iterations": iterations}, "run": {"seed": seed}})


@pytest.mark.parametrize(("task", "schedule", "dataset", "iterations", "metrics", "published"), [
    ("lvis", "2x", "LVIS v0.5_train", 180000,
     {"segm_AP": 24.0, "segm_AP50": 37.0, "segm_AP75": 25.0, "bbox_AP": 25.0}, ("24.4", "37.8", "25.8")),
    ("cityscapes", "24k", "Cityscapes train_fine", 24000, {"segm_AP": 33.0, "segm_AP50": 59.0}, ("59.6",)),
    ("densepose", "s1x", "DensePose-COCO train2014+valminusminival2014", 130000,
     {"dp_gps_AP": 48.0, "dp_gps_AP50": 80.0, "dp_gps_AP75": 51.0, "dp_gpsm_AP": 50.0, "bbox_AP": 55.0}, ("50.6",)),
])
def test_full_recipe_runs_get_the_papers_rows(write_record: WriteRecord, runs: Path, task: str, schedule: str,
                                              dataset: str, iterations: int, metrics: dict[str, float],
                                              published: tuple[str, ...]) -> None:
    write_record(f"{task}/result.json", _record(task, metrics, seed=0, schedule=schedule, dataset=dataset,
                                               iterations=iterations))
    (table,) = build_report([str(runs)], expected={}).tables
    heads = {"lvis": "LVIS v0.5 instance segmentation", "cityscapes": "Cityscapes instance segmentation",
             "densepose": "COCO dense pose"}
    assert table.title.startswith(heads[task])
    text = repr(table.rows)
    assert all(value in text for value in published), text  # the published supervised row's numbers
    assert "published" in text


def test_embedded_runs_get_no_published_row(write_record: WriteRecord, runs: Path) -> None:
    write_record("lvis/result.json", _record("lvis", {"segm_AP": 5.0, "segm_AP50": 9.0, "segm_AP75": 4.0,
                                                      "bbox_AP": 6.0}, seed=0, schedule="embedded",
                                             dataset="embedded", engine="torchvision", iterations=200))
    (table,) = build_report([str(runs)], expected={}).tables
    assert "published" not in repr(table.rows)
    assert [c.name for c in table.columns][2:6] == ["APmk", "APmk50", "APmk75", "APbb"]
