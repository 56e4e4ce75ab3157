"""Golden files: the fixture records in golden/records give exactly golden/report.md and golden/report.csv.

The fixtures cover several linear trials (mean ± std), supervised and random-init rows, a linear run shortened to
5 epochs, linear-cached and kNN, a pretraining stopped in its third epoch of 20, ImageNet rows with published
numbers, VOC and COCO with differences to supervised (one VOC record without its iterations, as records before
they were written), K and m sweeps with trials of other seeds, a second K curve of another recipe and a failed
m = 0 run, and malformed, unknown-version and incomplete records. MoCo v3 (written by hand in the shape
classification/linear.py writes): the v3 linear protocol on ImageNet at its 90 epochs (R50 and ViT-S/16, with the
published v3 rows) and shortened to 30 on the embedded data (two seeds, random init), a ViT's kNN row, and an m
sweep of v3 in the setting of v1's. The v1/v2 fixtures of the embedded data and ImageNet carry their whole recipe
(labelled MoCo v2, MoCo v1); the sweeps' partial configs name no version ("MoCo").

After an intended change of the output, regenerate with

    MOCO_REPORT_REGEN=1 .venv/bin/pytest tests/reports/test_golden.py

and review the diff of the golden files. Without the variable, any difference fails.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from reports.render import to_csv, to_markdown
from reports.report import Report, build_report

GOLDEN = Path(__file__).resolve().parent / "golden"
REGENERATE = os.environ.get("MOCO_REPORT_REGEN") == "1"


@pytest.fixture
def golden_report(monkeypatch: pytest.MonkeyPatch) -> Report:
    monkeypatch.chdir(GOLDEN)  # record paths are shown as given: "records/..."
    return build_report(["records"])


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if REGENERATE:
        path.write_text(text, encoding="utf-8", newline="")
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), f"golden/{name}",
                                            "generated", n=1))
        pytest.fail(f"{name} differs from the golden file (MOCO_REPORT_REGEN=1 rewrites it):\n{diff[:6000]}")


def test_markdown_matches_golden(golden_report: Report) -> None:
    check_golden("report.md", to_markdown(golden_report))


def test_csv_matches_golden(golden_report: Report) -> None:
    check_golden("report.csv", to_csv(golden_report))


def test_golden_fixture_counts(golden_report: Report) -> None:
    """Guards the fixture set itself: every kind of record the goldens are meant to cover is there."""
    assert len(golden_report.records) == 47
    assert len(golden_report.skipped) == 7
    assert {r.task for r in golden_report.records} == {"linear", "knn", "voc", "coco"}
    assert any(r.status == "failed" and r.sweep and r.sweep.value == 0 for r in golden_report.records)
    assert all("unrelated_result.json" not in s.path for s in golden_report.skipped)
    assert any(r.pretraining.unfinished for r in golden_report.records)
    assert {r.eval_length for r in golden_report.records if r.task == "linear"} == {5, 30, 90, 100}
    assert {r.protocol for r in golden_report.records if r.task == "linear"} == {"linear", "linear-mocov3",
                                                                                  "linear-cached"}
    v3 = [r for r in golden_report.records if r.pretraining.method == "mocov3"]
    assert {r.pretraining.arch for r in v3} == {"resnet18", "resnet50", "vit_small", "vit_tiny_p4"}
    assert any(r.sweep and r.sweep.method == "mocov3" for r in v3)
    assert {r.pretraining.variant for r in golden_report.records} == {"v1", "v2", None}
