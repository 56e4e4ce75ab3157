"""Rows that must not pass for finished real runs (issue 51, finding 1): a smoke run's, or an unfinished
pretraining's, are marked on the row (md, html, csv) and kept in tables of their own unless --mix-marked."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from typer.testing import CliRunner

from cli import app
from tests.reports.conftest import WriteRecord, base_record

RANDOM = {"source": "random", "format": "random", "arch": "resnet18", "sha256": None,
          "pretrain": {"method": "random init"}}


def backbone(epochs: int, planned: int, sha: str, *, smoke: bool = False) -> dict:
    return {"source": f"runs/{sha}/checkpoint_last.pth.tar", "format": "moco-suite", "arch": "resnet18",
            "sha256": sha * 32, "pretrain": {"method": "moco", "epochs": epochs, "smoke": smoke,
                                            "config": {"data": {"path": "embedded"}, "optim": {"epochs": planned}}}}


def test_smoke_and_unfinished_rows_are_marked_and_apart(write_record: WriteRecord, runs: Path,
                                                       tmp_path: Path) -> None:
    write_record("random/result.json", base_record(backbone=RANDOM))
    write_record("done/result.json", base_record(backbone=backbone(100, 100, "a1")))
    write_record("stopped/result.json", base_record(backbone=backbone(4, 100, "b2")))  # a demo stopped part-way
    write_record("smoked/result.json", base_record(backbone=backbone(1, 1, "c3", smoke=True), smoke=True))
    out = tmp_path / "r"
    result = CliRunner().invoke(app, ["report", str(runs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    markdown = (out / "report.md").read_text()
    titles = [line for line in markdown.splitlines() if line.startswith("## ")]
    assert titles == ["## Linear classification (epochs not recorded): embedded",
                      "## Linear classification (epochs not recorded): embedded, smoke runs (MOCO\\_SMOKE=1: "
                      "shortened; numbers mean nothing)",
                      "## Linear classification (epochs not recorded): embedded, unfinished pretrainings (stopped "
                      "before their planned epochs)"]
    real, smoke, unfinished = markdown.split("\n## ")[1:4]
    assert "random init (R18)" in real and "MoCo (R18, 100 ep, embedded) a1a1a1" in real
    assert "c3c3c3 \\[smoke\\]" in smoke and "[smoke]" not in real + unfinished
    assert "MoCo (R18, 4 of 100 ep, unfinished, embedded) b2b2b2" in unfinished
    assert "<td>MoCo (R18, 1 ep, embedded) c3c3c3 [smoke]</td>" in (out / "report.html").read_text()
    rows = {r["pretraining"]: (r["smoke"], r["pretrain_unfinished"]) for r in
            csv.DictReader(io.StringIO((out / "report.csv").read_text())) if r["origin"] == "ours"}
    assert rows == {"random init (R18)": ("no", ""), "MoCo (R18, 100 ep, embedded) a1a1a1": ("no", "no"),
                    "MoCo (R18, 1 ep, embedded) c3c3c3": ("yes", "no"),
                    "MoCo (R18, 4 of 100 ep, unfinished, embedded) b2b2b2": ("no", "yes")}
    mixed = CliRunner().invoke(app, ["report", str(runs), "--out", str(tmp_path / "m"), "--mix-marked"])
    assert mixed.exit_code == 0, mixed.output
    markdown = (tmp_path / "m" / "report.md").read_text()
    assert [line for line in markdown.splitlines() if line.startswith("## ")] == titles[:1]  # asked: one table
    assert "c3c3c3 \\[smoke\\]" in markdown and "4 of 100 ep, unfinished" in markdown
