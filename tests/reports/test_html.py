"""The HTML report is one self-contained file (inline CSS, PNG plots as data URIs), and Chromium renders it."""

from __future__ import annotations

import base64
import re
import struct
from pathlib import Path

import pytest

from reports.render import to_html
from reports.report import Report, build_report
from reports.screenshot import find_chromium, screenshot

GOLDEN = Path(__file__).resolve().parent / "golden"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def golden_html() -> str:
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(GOLDEN)  # the fixtures' checkpoint paths (and so their metrics.jsonl) are relative to it
        report: Report = build_report(["records"])
        return to_html(report)


def test_html_is_self_contained(golden_html: str) -> None:
    assert "http://" not in golden_html and "https://" not in golden_html
    assert "<link" not in golden_html and "<script" not in golden_html and "@import" not in golden_html
    sources = re.findall(r"""\b(?:src|href)\s*=\s*["']([^"']*)""", golden_html)
    assert len(sources) == 4  # K plot, m plot, MoCo v3's m plot, one pretraining run's curves
    for src in sources:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG_MAGIC)


def test_html_has_every_table_and_marks(golden_html: str) -> None:
    # 16 result tables (3 of MoCo v3, 1 of an unfinished pretraining) and the skipped records
    assert golden_html.count("<table>") == 17
    # two studies (reports/studies.py): the embedded data's and ImageNet's, each under its heading
    assert '<h2 class="study">Study: embedded</h2>' in golden_html
    assert '<h2 class="study">Study: imagenet</h2>' in golden_html
    assert "<h3>Linear classification (the MoCo v3 protocol, 90 epochs): imagenet</h3>" in golden_html
    assert "<h3>Ablation: momentum m of MoCo v3, " in golden_html
    assert '<span class="gain">(+2.4)</span>' in golden_html and '<span class="loss">(-21.3)</span>' in golden_html
    assert '<tr class="failed">' in golden_html and '<tr class="secondary">' in golden_html
    assert "Pretraining curves" in golden_html and "Skipped records" in golden_html


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head.startswith(PNG_MAGIC)
    return struct.unpack(">II", head[16:24])


@pytest.mark.skipif(find_chromium() is None, reason="no Chromium on PATH")
def test_screenshot_with_headless_chromium(golden_html: str, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(golden_html, encoding="utf-8")
    png = screenshot(page, tmp_path / "shot.png", width=800, height=600)
    assert png_size(png) == (800, 600)


def test_screenshot_without_chromium_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_chromium() is None
    with pytest.raises(FileNotFoundError, match="no Chromium"):
        screenshot(tmp_path / "x.html", tmp_path / "x.png")
