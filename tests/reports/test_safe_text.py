"""Control characters escaped as the commands' own guard escapes them, and CSV cells neutralised as OWASP's
CSV-injection guidance says: no cell read back starts a formula, and no field splits its row."""

from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moco_core import terminal
from reports.render import to_csv
from reports.report import CSV_COLUMNS, Report, build_report
from reports.safe_text import FORMULA_START, csv_cell, is_plain_number, printable

from .conftest import base_record

FORMULA = ("=", "+", "-", "@", "\t", "\r", "\n")  # OWASP's list, with the line feed it added in 2025


def test_the_report_escapes_with_the_commands_guard() -> None:
    """One set of control characters: the report's escaping is moco_core.terminal's own function."""
    assert printable is terminal.printable
    assert printable("a\x1bc\u202eb", newlines=False) == "a\\x1bc\\u202eb"


@pytest.mark.parametrize(("field", "cell"), [
    ("=HYPERLINK(\"http://x/?\"&A1)", "'=HYPERLINK(\"http://x/?\"&A1)"),
    ("+1+1", "'+1+1"), ("-1+cmd|' /C calc'!A0", "'-1+cmd|' /C calc'!A0"), ("@SUM(A1:A9)", "'@SUM(A1:A9)"),
    ("\t=1", "'\t=1"), ("\n=1", "'\n=1"),
    ("\r=1", "\\r=1"),  # the carriage return is shown as its escape: nothing left to neutralise
    ("-1.5", "-1.5"), ("-21.3", "-21.3"), ("0.999", "0.999"), ("1e-05", "1e-05"), ("4096", "4096"),
    ("-", "'-"), ("-1e", "'-1e"), ("+5", "'+5"), ("--1", "'--1"),
    ("a=1", "a=1"), ("", ""), ("'=1", "'=1"), ("MoCo (R18, 15 ep)", "MoCo (R18, 15 ep)"),
    ("\x1b]0;x\x07", "\\x1b]0;x\\x07"),
])
def test_csv_cell(field: str, cell: str) -> None:
    assert csv_cell(field) == cell


def test_the_formula_characters_are_owasps() -> None:
    assert set(FORMULA_START) == set(FORMULA)


def report_of(rows: list[dict[str, str]]) -> Report:
    return Report(roots=[], records=[], skipped=[], tables=[], tidy=rows)


def read_back(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def assert_safe(cells: list[list[str]], rows: int) -> None:
    assert len(cells) == rows + 1  # the header, then one line per tidy row
    assert all(len(line) == len(CSV_COLUMNS) for line in cells)
    for line in cells:
        for cell in line:
            assert not cell.startswith(FORMULA) or is_plain_number(cell), cell


@settings(max_examples=500, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.text(), min_size=len(CSV_COLUMNS), max_size=len(CSV_COLUMNS)), max_size=4))
def test_any_field_text_reads_back_as_the_same_cells_and_no_formula(values: list[list[str]]) -> None:
    rows = [dict(zip(CSV_COLUMNS, line, strict=True)) for line in values]
    cells = read_back(to_csv(report_of(rows)))
    assert_safe(cells, len(rows))
    for line, original in zip(cells[1:], values, strict=True):
        for cell, field in zip(line, original, strict=True):
            shown = printable(field)  # what a cell holds: the field, control characters escaped, at most a quote
            assert cell == shown or (cell == "'" + shown and shown.startswith(FORMULA))


NUMBERS = st.floats(allow_nan=False, allow_infinity=False, min_value=0, max_value=100)  # a metric is a percentage


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(text=st.text(min_size=1), top1=NUMBERS, sup=NUMBERS)
def test_any_record_text_gives_a_csv_without_formulas(text: str, top1: float, sup: float) -> None:
    """The text in every string field of records (as researchers share them), any percentages: the CSV reads back
    with its rows whole, no formula, and the numbers, negative differences among them, as numbers."""
    voc = {"task": "voc", "protocol": "voc", "engine": text, "config": {"model": text, "schedule": text},
           "dataset": {"path": text, "name": text}}
    records = {
        "a.result.json": base_record(dataset={"path": text, "name": text}, sweep={
            "param": "queue_size", "value": 256, "method": text}),
        "b.result.json": base_record(status="failed", failure=text, backbone={
            **base_record()["backbone"], "source": text, "pretrain": {"method": text, "config": {"data": {
                "path": text}}}}),
        "c.result.json": base_record(**voc, metrics={"AP50": top1, "AP": 1.0, "AP75": 1.0,
                                                     "per_class_AP50": {text: top1}}),
        "d.result.json": base_record(**voc, metrics={"AP50": sup, "AP": 1.0, "AP75": 1.0}, backbone={
            "source": "/w.pth", "format": "torchvision", "arch": "resnet50", "sha256": "7f" * 32,
            "pretrain": {"method": "supervised"}}),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, record in records.items():
            Path(tmp, name).write_text(json.dumps(record), encoding="utf-8")
        report = build_report([tmp], published=[], expected={})
    assert len(report.records) == 4
    cells = read_back(to_csv(report))
    assert_safe(cells, len(report.tidy))
    deltas = [line[CSV_COLUMNS.index("delta_vs_supervised")] for line in cells[1:]]
    assert repr(round(top1 - sup, 6)) in deltas  # a number, negative or not, stays as written
