"""``moco eval davis`` records in ``moco report``: a table of J&F, J and F a feature map read (tap and stride),
titled as the protocol it ran; before, such records were skipped as an unknown task."""

from __future__ import annotations

from pathlib import Path

from reports.published import load_published
from reports.report import build_report

from .conftest import WriteRecord, base_record

RANDOM = {"source": "random", "format": "random", "arch": "resnet18", "pretrain": {"method": "random init"}}


def davis(jf: float, tap: str = "layer4", stride: int = 32, **overrides: object) -> dict:
    return base_record(task="davis", protocol="label-propagation",
                       metrics={"J&F_mean": jf, "J_mean": jf + 2, "F_mean": jf - 2},
                       config={"tap": tap, "stride": stride, "context": 7, "topk": 5},
                       dataset={"path": "embedded", "name": "embedded DAVIS-layout videos"}, **overrides)


def test_davis_records_make_a_table_a_feature_map(write_record: WriteRecord, runs: Path) -> None:
    write_record("davis/moco/result.json", davis(40.0))
    write_record("davis/random/result.json", davis(20.0, backbone=RANDOM))
    write_record("davis/moco_layer3/result.json", davis(45.0, tap="layer3", stride=16))
    report = build_report([str(runs)], published=load_published(), expected={})
    assert not report.skipped
    tables = {t.title: t for t in report.tables}
    title = "Video object segmentation by label propagation (DINO's protocol; {}): embedded DAVIS-layout videos"
    last, third = tables[title.format("layer4, stride 32")], tables[title.format("layer3, stride 16")]
    assert [c.name for c in last.columns][:5] == ["Pretraining", "n", "J&F_mean", "J_mean", "F_mean"]
    rows = {row.cells[0].text: [c.text for c in row.cells[2:5]] for row in last.rows}
    assert rows["random init (R18)"] == ["20.0", "22.0", "18.0"] and len(rows) == 2
    assert [[c.text for c in row.cells[2:5]] for row in third.rows] == [["45.0", "47.0", "43.0"]]
