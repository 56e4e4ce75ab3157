"""Semi-supervised tables (a column pair per label fraction or subset file) and runs on custom folders grouped by
their content digest, in every format the report renders."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest

from reports.records import RecordError, subset_label
from reports.render import to_csv, to_html, to_latex, to_markdown
from reports.report import build_report
from tests.reports.conftest import WriteRecord, base_record

RANDOM = {"source": "random", "format": "random", "arch": "resnet18"}
DIGEST = "d1" * 32


def _semi(labels: str | None, top1: float, *, random: bool = False, seed: int = 0, **dataset: Any) -> dict[str, Any]:
    subset = {"kind": "labels", "labels": labels, "seed": seed, "images": 200, "of": 2000} if labels else None
    record = base_record(metrics={"top1": top1, "top5": min(top1 + 30, 100.0)}, config={"optim": {"epochs": 30}},
                         dataset={"path": "embedded", "classes": 8, **({"subset": subset} if subset else {}),
                                  **dataset})
    if random:
        record["backbone"] = RANDOM
    return record


@pytest.mark.parametrize("subset, label", [
    (None, None),
    ({"kind": "labels", "labels": "10%", "seed": 0}, "10%"),
    ({"kind": "labels", "labels": "1%", "seed": 3}, "1% seed 3"),
    ({"kind": "file", "file": "1percent.txt", "sha256": "3f2a1b" + "0" * 58}, "1percent.txt 3f2a1b"),
])
def test_the_subset_is_named_by_fraction_and_seed_or_file_and_hash(subset: Any, label: str | None) -> None:
    assert subset_label(subset) == label


def test_an_unknown_subset_kind_skips_the_record() -> None:
    with pytest.raises(RecordError, match="unknown kind 'stratified'"):
        subset_label({"kind": "stratified"})


def test_fractions_are_columns_of_one_table_beside_the_full_label_table(write_record: WriteRecord,
                                                                         runs: Path) -> None:
    """Trials 52, 56 (mean 54, std 2.83) of MoCo and 40, 42 of random init on 10%; one MoCo trial on 1%; and a
    run on every label, which keeps its own table."""
    for seed, top1 in enumerate((52.0, 56.0)):
        write_record(f"moco10/seed_{seed}/result.json", _semi("10%", top1))
    for seed, top1 in enumerate((40.0, 42.0)):
        write_record(f"random10/seed_{seed}/result.json", _semi("10%", top1, random=True))
    write_record("moco1/result.json", _semi("1%", 30.0))
    write_record("full/result.json", _semi(None, 70.0))
    report = build_report([str(runs)], published=[], expected={})
    titles = [t.title for t in report.tables]
    assert titles == ["Linear classification (30 of the paper's 100 epochs): embedded",
                      "Semi-supervised, 1% / 10% of the labels: Linear classification (30 of the paper's 100 epochs): "
                      "embedded"]
    semi = report.tables[1]
    assert [c.name for c in semi.columns] == ["Pretraining", "n", "1% top-1", "1% top-5", "10% top-1", "10% top-5"]
    rows = {r.cells[0].text: [c.plain() for c in r.cells[1:6]] for r in semi.rows}
    assert rows["random init (R18)"] == ["–, 2", "–", "–", "41.0 ± 1.4", "71.0 ± 1.4"]
    assert rows["MoCo (R18, 15 ep, embedded) a1b2c3"] == ["1, 2", "30.0", "60.0", "54.0 ± 2.8", "84.0 ± 2.8"]
    # the margin: 54 - 41 = 13 over sqrt(2.83^2 / 2 + 1.41^2 / 2) = 2.236 -> 5.8 SE
    assert any("Above random init (10% top-1" in n and "+13.0 (5.8 SE)" in n for n in semi.notes)
    assert any("holds no semi-supervised numbers" in n for n in semi.notes)
    section = {row["section"] for row in report.tidy if row["labels"] == "10%"}
    assert section == {"semi:linear:linear:embedded:30ep"}
    markdown, latex, page = to_markdown(report), to_latex(report), to_html(report)
    assert "10% top-1" in markdown and "54.0 ± 2.8" in markdown
    assert r"10\% top-1" in latex and "10% top-1" in page
    table = list(csv.DictReader(io.StringIO(to_csv(report))))
    assert {(r["labels"], r["mean"]) for r in table if r["metric"] == "top1" and r["pretraining"].startswith(
        "MoCo")} == {("", "70.0"), ("1%", "30.0"), ("10%", "54.0")}


def test_runs_on_copies_of_one_folder_share_a_table_named_by_the_folder(write_record: WriteRecord,
                                                                        runs: Path) -> None:
    """The same content (digest) at two paths is one setting, shown by the first path; other content at one of
    those paths is another."""
    for i, path in enumerate(("/scratch/cifar10", "/data/cifar10")):
        write_record(f"a{i}/result.json", _semi(None, 60.0 + 2 * i, path=path, folder="cifar10",
                                                content_sha256=DIGEST, classes=10))
    write_record("changed/result.json", _semi(None, 10.0, path="/data/cifar10", folder="cifar10",
                                              content_sha256="e2" * 32, classes=10))
    report = build_report([str(runs)], published=[], expected={})
    tables = [t for t in report.tables if t.title.endswith("cifar10")]
    assert len(tables) == 2
    grouped = next(t for t in tables if DIGEST[:12] in t.subtitle)
    assert grouped.subtitle.startswith(f"Evaluation data: /data/cifar10 (content digest {DIGEST[:12]}")
    assert [c.plain() for c in grouped.rows[0].cells[1:3]] == ["2", "61.0 ± 1.4"]
    assert {r["data_sha256"] for r in report.tidy if r["dataset"] == "cifar10"} == {DIGEST, "e2" * 32}


def test_flowers_given_by_torchvision_root_is_named_by_its_folder(write_record: WriteRecord, runs: Path) -> None:
    write_record("f/result.json", _semi(None, 80.0, path="/data/torchvision", folder="flowers-102",
                                        content_sha256=DIGEST, classes=102))
    (table,) = build_report([str(runs)], published=[], expected={}).tables
    assert table.title.endswith(": flowers-102")
