"""Semantic segmentation records in ``moco report``: their table, the difference to the supervised row, and the
paper's VOC12 and Cityscapes rows (Table 6) beside a full-recipe run only."""

from __future__ import annotations

from pathlib import Path

from reports.published import load_published
from reports.records import load_records
from reports.report import build_report

from .conftest import WriteRecord, base_record

SUPERVISED = {"source": "/w/sup.pth", "format": "moco-suite", "arch": "resnet50",
              "pretrain": {"method": "supervised", "config": {"data": {"path": "/data/imagenet"}}}}
RANDOM = {"source": "random", "format": "random", "arch": "resnet50", "pretrain": {"method": "random init"}}


def semseg(name: str, schedule: str | None, iterations: int, mIoU: float, **overrides: object) -> dict:  # noqa: N803
    config = {"model": "R50 FCN-style os16", "iterations": iterations, **({"schedule": schedule} if schedule else {})}
    return base_record(task="semseg", protocol="semseg", engine="torchvision", config=config,
                       metrics={"mIoU": mIoU, "pixel_acc": 90.0, "per_class_IoU": {"road": 97.0}},
                       dataset={"path": "/data", "name": name}, **overrides)


def tables_by_title(runs: Path) -> dict:
    return {t.title: t for t in build_report([str(runs)], published=load_published(), expected={}).tables}


def test_full_recipe_runs_sit_beside_the_papers_rows(write_record: WriteRecord, runs: Path) -> None:
    moco_r50 = {**base_record()["backbone"], "arch": "resnet50"}
    write_record("voc/moco.result.json", semseg("VOC12", "30k", 30000, 72.0, backbone=moco_r50))
    write_record("voc/sup.result.json", semseg("VOC12", "30k", 30000, 74.0, backbone=SUPERVISED))
    write_record("city/moco.result.json", semseg("Cityscapes", "90k", 90000, 75.0, backbone=moco_r50))
    tables = tables_by_title(runs)
    voc = tables["Semantic segmentation (R50 FCN-style os16, 30k schedule, 30000 iterations, torchvision): VOC12"]
    cells = {row.cells[0].text: row.cells for row in voc.rows}
    assert [c.name for c in voc.columns][:4] == ["Pretraining", "n", "mIoU", "pixel acc."]
    # the paper's Table 6, VOC12 semantic: supervised 74.4, MoCo IN-1M 72.5 (-1.9), MoCo IG-1B 73.6 (-0.8)
    published = {label: c for label, c in cells.items() if label.startswith("published")}
    assert sorted((c[2].text, c[2].delta) for c in published.values()) == [
        ("72.5", "-1.9"), ("73.6", "-0.8"), ("74.4", None)]
    ours = [c for label, c in cells.items() if not label.startswith("published")]
    assert sorted((c[2].text, c[2].delta) for c in ours) == [("72.0", "-2.0"), ("74.0", None)]
    city = tables["Semantic segmentation (R50 FCN-style os16, 90k schedule, 90000 iterations, torchvision): "
                  "Cityscapes"]
    assert sorted(r.cells[2].text for r in city.rows if r.kind != "ours") == ["74.6", "75.3", "75.5"]


def test_no_published_rows_beside_other_settings(write_record: WriteRecord, runs: Path) -> None:
    write_record("short.result.json", semseg("VOC12", "30k, 2 it", 2, 10.0))  # a shortened run
    write_record("mine.result.json", semseg("custom: images/train:labels/train", "30k", 30000, 10.0))
    write_record("toy.result.json", semseg("embedded", "embedded", 300, 10.0, backbone=RANDOM))
    for title, table in tables_by_title(runs).items():
        assert all(r.kind == "ours" for r in table.rows), title


def test_a_record_without_schedule_is_skipped(write_record: WriteRecord, runs: Path) -> None:
    write_record("bad.result.json", semseg("VOC12", None, 30000, 10.0))
    records, skipped = load_records([str(runs)])
    assert not records and "missing field 'config.schedule' (30k, 90k) for task semseg" in skipped[0].reason
