"""Golden files: the fixture records in golden/records give exactly golden/report.md and golden/report.csv.

The fixtures cover several linear trials (mean ± std), supervised and random-init rows, a linear run shortened to
5 epochs, linear-cached and kNN, a pretraining stopped in its third epoch of 20, ImageNet rows with published
numbers, VOC and COCO with differences to supervised (one VOC record without its iterations, as records before
they were written), K and m sweeps with trials of other seeds, a second K curve of another recipe and a failed
m = 0 run, and malformed, unknown-version and incomplete records.

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
    assert len(golden_report.records) == 38
    assert len(golden_report.skipped) == 7
    assert {r.task for r in golden_report.records} == {"linear", "knn", "voc", "coco"}
    assert any(r.status == "failed" and r.sweep and r.sweep.value == 0 for r in golden_report.records)
    assert all("unrelated_result.json" not in s.path for s in golden_report.skipped)
    assert any(r.pretraining.unfinished for r in golden_report.records)
    assert {r.eval_length for r in golden_report.records if r.task == "linear"} == {5, 100}
