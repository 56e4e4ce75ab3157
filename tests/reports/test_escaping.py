"""Strings from records (dataset names, labels, class names, failure reasons) are escaped in every format."""

from __future__ import annotations

import csv
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from reports.render import latex_escape, md_escape, to_csv, to_html, to_latex, to_markdown
from reports.report import Report, build_report

from .conftest import WriteRecord, base_record

NASTY = 'a<script>alert("x")</script> | *b* _c_ `d` & 100% $5 #1 {e} ~f^ [g] \\h\nnext'
HTML_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "section", "table", "thead",
             "tbody", "tr", "th", "td", "span", "ul", "li", "figure", "img", "figcaption"}


@pytest.fixture
def nasty_report(write_record: WriteRecord, runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Report:
    """Records whose dataset name, class name, mechanism, failure reason and pretraining data carry NASTY."""
    pretrain_dir = tmp_path / "pretrain"
    pretrain_dir.mkdir()
    (pretrain_dir / "metrics.jsonl").write_text(
        json.dumps({"step": 5, "epoch": 0, "loss": 6.0, "accuracy": 10.0}) + "\n"
        + json.dumps({"step": 5, "epoch": 0, "epoch_loss": 6.0, "epoch_accuracy": 10.0}) + "\n"
        + json.dumps({"step": 5, "epoch": 0, "knn_top1": 20.0}) + "\nnot json\n")
    backbone = {**base_record()["backbone"], "source": str(pretrain_dir / "checkpoint_last.pth.tar"),
                "pretrain": {"method": "moco", "epochs": 1, "config": {"data": {"path": "/d/" + NASTY}}}}
    write_record("voc.result.json", task="voc", protocol="voc", engine="detectron2", config={"model": "R50-C4"},
                 dataset={"path": "/data/" + NASTY, "name": NASTY}, backbone=backbone,
                 metrics={"AP50": 1.0, "AP": 2.0, "AP75": 3.0, "per_class_AP50": {NASTY: 4.0}})
    sweep = {"param": "queue_size", "value": 256, "method": NASTY}
    write_record("ok.result.json", sweep=sweep)
    write_record("fail.result.json", sweep={**sweep, "value": 1024}, status="failed", failure=NASTY)
    write_record(NASTY.replace("/", "_").replace("\n", "_") + ".result.json", "{broken")
    monkeypatch.chdir(tmp_path)
    return build_report(["runs"])


def unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_markdown_escapes_and_keeps_tables_intact(nasty_report: Report) -> None:
    md = to_markdown(nasty_report)
    assert "<script>" not in md and "\\<script\\>" in md
    assert md_escape(NASTY) in md
    assert md_escape(NASTY) == ('a\\<script\\>alert("x")\\</script\\> \\| \\*b\\* \\_c\\_ \\`d\\` \\& 100% \\$5 \\#1 '
                                '{e} \\~f\\^ \\[g\\] \\\\h next')
    assert not any(line.startswith("next") for line in md.splitlines())
    tables = re.findall(r"(?:^\|.*\n)+", md, flags=re.M)
    assert len(tables) >= 4
    for table in tables:
        counts = {unescaped_pipes(line) for line in table.splitlines()}
        assert len(counts) == 1, table


def test_latex_escapes_every_special_character(nasty_report: Report) -> None:
    assert latex_escape("& % $ # _ { } ~ ^ \\ < > | \" ` [ ]") == (
        r"\& \% \$ \# \_ \{ \} \textasciitilde{} \textasciicircum{} \textbackslash{} \textless{} \textgreater{} "
        r"\textbar{} \textquotedbl{} \textasciigrave{} {[} {]}")
    tex = to_latex(nasty_report)
    assert latex_escape(NASTY) in tex
    assert "100% " not in tex and "$5" not in tex.replace(r"\$5", "")
    body = tex.replace(r"\{", "").replace(r"\}", "")
    assert body.count("{") == body.count("}")
    assert r"\begin{tabular}" in tex and r"\toprule" in tex and r"\bottomrule" in tex


def test_html_escapes_and_has_only_our_tags(nasty_report: Report) -> None:
    page = to_html(nasty_report)
    assert "<script" not in page and "&lt;script&gt;" in page

    class Tags(HTMLParser):
        seen: set[str] = set()

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.seen.add(tag)

    parser = Tags()
    parser.feed(page)
    assert parser.seen <= HTML_TAGS
    assert "img" in parser.seen  # the ablation plot and the curves, whose titles carry "$"


def test_csv_round_trips_every_string(nasty_report: Report) -> None:
    rows = list(csv.DictReader(io.StringIO(to_csv(nasty_report))))
    assert len(rows) == len(nasty_report.tidy)
    assert any(r["class"] == NASTY for r in rows)
    assert any(r["note"] == NASTY and r["status"] == "failed" for r in rows)
    assert any(r["dataset"] == NASTY for r in rows)
    assert any(r["status"] == "skipped" and "malformed JSON" in r["note"] for r in rows)
