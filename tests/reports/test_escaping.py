"""Strings from records (dataset names, labels, class names, failure reasons) are escaped in every format, and so
are control characters: a record holding ``ESC c`` must not reset the terminal of whoever reads report.md."""

from __future__ import annotations

import csv
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from reports.render import latex_escape, md_escape, to_csv, to_html, to_latex, to_markdown, write_report
from reports.report import FORMATS, Report, build_report

from .conftest import WriteRecord, base_record

NASTY = 'a<script>alert("x")</script> | *b* _c_ `d` & 100% $5 #1 {e} ~f^ [g] \\h\nnext'
# ESC c (reset), ESC [2J (clear), an OSC title ending in BEL, C1 CSI (0x9b), a bidi override, a lone surrogate, a
# carriage return, NUL and a tab.
CONTROL = "\x1bc\x1b[2J\x1b]0;owned\x07 \x9b31m \u202eevil\u202c \ud800 a\rb \x00\tz"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
HTML_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "section", "table", "thead",
             "tbody", "tr", "th", "td", "span", "ul", "li", "figure", "img", "figcaption"}


def report_carrying(text: str, write_record: WriteRecord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                    file_name: str) -> Report:
    """Records whose dataset name and path, class name, mechanism, failure reason and pretraining data carry
    ``text``, a pretraining run with its curves, and an unreadable record named ``file_name``."""
    pretrain_dir = tmp_path / "pretrain"
    pretrain_dir.mkdir()
    (pretrain_dir / "metrics.jsonl").write_text(
        json.dumps({"step": 5, "epoch": 0, "loss": 6.0, "accuracy": 10.0}) + "\n"
        + json.dumps({"step": 5, "epoch": 0, "epoch_loss": 6.0, "epoch_accuracy": 10.0}) + "\n"
        + json.dumps({"step": 5, "epoch": 0, "knn_top1": 20.0}) + "\nnot json\n")
    backbone = {**base_record()["backbone"], "source": str(pretrain_dir / "checkpoint_last.pth.tar"),
                "pretrain": {"method": "moco", "epochs": 1, "config": {"data": {"path": "/d/" + text}}}}
    write_record("voc.result.json", task="voc", protocol="voc", engine="detectron2", config={"model": "R50-C4"},
                 dataset={"path": "/data/" + text, "name": text}, backbone=backbone,
                 metrics={"AP50": 1.0, "AP": 2.0, "AP75": 3.0, "per_class_AP50": {text: 4.0}})
    sweep = {"param": "queue_size", "value": 256, "method": text}
    write_record("ok.result.json", sweep=sweep)
    write_record("fail.result.json", sweep={**sweep, "value": 1024}, status="failed", failure=text)
    write_record(file_name, "{broken")
    monkeypatch.chdir(tmp_path)
    return build_report(["runs"])


@pytest.fixture
def nasty_report(write_record: WriteRecord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Report:
    return report_carrying(NASTY, write_record, tmp_path, monkeypatch,
                           NASTY.replace("/", "_").replace("\n", "_") + ".result.json")


@pytest.fixture
def control_report(write_record: WriteRecord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Report:
    """CONTROL in every field, and in a record's file name with an undecodable byte (0xff: a lone surrogate)."""
    return report_carrying(CONTROL, write_record, tmp_path, monkeypatch, "ctl\x1b[2J\x9b\u202e\udcff.result.json")


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


def test_control_characters_are_escaped_in_every_file(control_report: Report, tmp_path: Path) -> None:
    written = write_report(control_report, tmp_path / "out", FORMATS)
    assert len(written) == 4
    for path in written:
        text = path.read_text(encoding="utf-8")  # a lone surrogate would not even have been written
        assert RAW_CONTROL.search(text) is None, (path.name, RAW_CONTROL.search(text))
    md = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    # worked by hand: the carriage return folded (a Markdown row is one line), every other control shown as its
    # escape, whose backslash Markdown then escapes; [ ] escaped as Markdown's
    assert md_escape(CONTROL) == (r"\\x1bc\\x1b\[2J\\x1b\]0;owned\\x07 \\x9b31m \\u202eevil\\u202c \\ud800 a b "
                                  r"\\x00\\tz")
    assert md_escape(CONTROL) in md
    assert r"ctl\\x1b\[2J\\x9b\\u202e\\udcff.result.json" in md  # the skipped file's name
    tex = (tmp_path / "out" / "report.tex").read_text(encoding="utf-8")
    assert latex_escape(CONTROL) in tex and r"\textbackslash{}x1bc\textbackslash{}x1b{[}2J" in tex
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert r"\x1bc\x1b[2J\x1b]0;owned\x07 \x9b31m \u202eevil\u202c \ud800 a\rb \x00" in page


def test_control_characters_in_csv_cells_are_escaped_and_rows_stay_whole(control_report: Report,
                                                                        tmp_path: Path) -> None:
    write_report(control_report, tmp_path / "out", ["csv"])
    with (tmp_path / "out" / "report.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(control_report.tidy)
    escaped = r"\x1bc\x1b[2J\x1b]0;owned\x07 \x9b31m \u202eevil\u202c \ud800 a\rb \x00" + "\tz"  # tab kept
    assert any(r["class"] == escaped for r in rows) and any(r["note"] == escaped for r in rows)
    assert any(r["status"] == "skipped" and r["files"].endswith(r"ctl\x1b[2J\x9b\u202e\udcff.result.json")
               for r in rows)
