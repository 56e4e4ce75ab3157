"""A report a reader can trust at a glance (issue 51, finding 6): a folder of several studies is reported study by
study (and says which it found: --only picks one, --split writes a page each), no plot of a single point, no
absolute path in a caption, and a header that promises only what the tables show."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli import app
from tests.reports.conftest import WriteRecord, base_record

RANDOM = {"source": "random", "format": "random", "arch": "resnet18", "sha256": None,
          "pretrain": {"method": "random init"}}


def ours(source: str, data: str, sha: str, epochs: int = 30) -> dict[str, Any]:
    return {"source": source, "format": "moco-suite", "arch": "resnet18", "sha256": sha * 32,
            "pretrain": {"method": "moco", "epochs": epochs,
                         "config": {"data": {"path": data}, "optim": {"epochs": epochs}}}}


@pytest.fixture
def three_studies(write_record: WriteRecord, runs: Path) -> Path:
    """A moco demo (its demo.json), the tour on the embedded data and a study of one's own digits."""
    (runs / "demo").mkdir(parents=True)
    (runs / "demo" / "demo.json").write_text('{"steps": []}')
    for name, backbone in (("moco", ours("runs/demo/pretrain/moco/checkpoint_last.pth.tar", "embedded", "d1")),
                           ("random", RANDOM)):
        write_record(f"demo/linear/{name}/result.json", base_record(backbone=backbone))
    write_record("lincls_embedded/embedded/result.json",
                 base_record(backbone=ours("runs/embedded/checkpoint_last.pth.tar", "embedded", "e1")))
    digits = {"path": "/data/digits", "classes": 10}
    write_record("digits/linear/moco/result.json",
                 base_record(dataset=digits, backbone=ours("runs/digits/v3/checkpoint_last.pth.tar", "/data/digits",
                                                           "f1")))
    write_record("digits/linear/random/result.json", base_record(dataset=digits, backbone=RANDOM))
    return runs


def test_several_studies_are_found_named_and_kept_apart(three_studies: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["report", str(three_studies), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "found 3 studies: 'demo', 'digits', 'embedded'" in result.output
    markdown = (out / "report.md").read_text()
    assert [line for line in markdown.splitlines() if line.startswith("## Study")] == [
        "## Study: demo", "## Study: digits", "## Study: embedded"]
    # the demo's MoCo row and the tour's (one recipe) are not two trials of one row: each is in its study's table
    assert markdown.count("| MoCo (R18, 30 ep, embedded)") == 2
    assert '"study"' in (out / "report.csv").read_text().splitlines()[0]
    only = CliRunner().invoke(app, ["report", str(three_studies), "--out", str(tmp_path / "digits"), "--only",
                                    "digits"])
    assert only.exit_code == 0, only.output
    page = (tmp_path / "digits" / "report.md").read_text()
    assert "## Study" not in page  # one study chosen: one section, as a report of one study
    assert [line for line in page.splitlines() if line.startswith("## ")] == [
        "## Linear classification (epochs not recorded): digits"]
    split = CliRunner().invoke(app, ["report", str(three_studies), "--out", str(tmp_path / "pages"), "--split"])
    assert split.exit_code == 0, split.output
    assert sorted(p.parent.name for p in (tmp_path / "pages").glob("*/report.html")) == ["demo", "digits",
                                                                                         "embedded"]
    unknown = CliRunner().invoke(app, ["report", str(three_studies), "--only", "nope"])
    assert unknown.exit_code == 2
    assert unknown.output.strip() == ("error: --only: no study 'nope' here; the studies: 'demo', 'digits', "
                                      "'embedded'")


def test_one_study_reads_as_before(write_record: WriteRecord, runs: Path, tmp_path: Path) -> None:
    write_record("a/result.json", base_record())
    result = CliRunner().invoke(app, ["report", str(runs), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0 and "studies" not in result.output
    assert "## Study" not in (tmp_path / "r" / "report.md").read_text()


def metrics_lines(run: Path, lines: list[dict[str, Any]]) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_no_plot_of_one_point_and_no_absolute_path_in_a_caption(write_record: WriteRecord, runs: Path,
                                                                 tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    one, many = tmp_path / "pretrain" / "one", tmp_path / "pretrain" / "many"
    metrics_lines(one, [{"step": 1, "epoch": 0, "loss": 5.0, "accuracy": 1.0}])  # a smoke run: one line
    metrics_lines(many, [{"step": s, "epoch": 0, "loss": 5.0 - s, "accuracy": s} for s in (1, 2, 3)])
    write_record("one/result.json", base_record(backbone=ours(str(one / "checkpoint_last.pth.tar"), "embedded",
                                                              "a1", epochs=1)))
    write_record("many/result.json", base_record(backbone=ours(str(many / "checkpoint_last.pth.tar"), "embedded",
                                                               "b2")))
    sweep = base_record(sweep={"param": "momentum", "value": 0.9, "method": "moco"})
    write_record("sweep/result.json", sweep)  # an ablation of one point
    result = CliRunner().invoke(app, ["report", "runs", "--out", "report"])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "report" / "report.html").read_text()
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", page)
    assert captions == ["MoCo (R18, 30 ep, embedded) b2b2b2: pretrain/many/metrics.jsonl"]  # relative to the cwd
    assert str(tmp_path) not in " ".join(captions)
    assert "One point logged, nothing to plot: MoCo (R18, 1 ep, embedded) a1a1a1 (pretrain/one/metrics.jsonl)" \
        in page
    assert page.count("<img") == 1  # the ablation's single point is no plot either


def test_the_header_promises_only_what_the_tables_show(write_record: WriteRecord, runs: Path,
                                                       tmp_path: Path) -> None:
    write_record("a/result.json", base_record())
    result = CliRunner().invoke(app, ["report", str(runs), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0
    assert "in parentheses" not in (tmp_path / "r" / "report.md").read_text()  # a linear table has no differences
