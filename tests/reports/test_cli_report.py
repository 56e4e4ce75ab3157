"""``moco report`` through the real command line: files written, Markdown printed, user errors with exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from cli import app

from .conftest import WriteRecord

GOLDEN = Path(__file__).resolve().parent / "golden"
ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_report_writes_every_format_and_prints_markdown(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    result = runner.invoke(app, ["report", str(GOLDEN / "records"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["report.csv", "report.html", "report.md", "report.tex"]
    md = (out / "report.md").read_text()
    assert md in result.output  # the Markdown is printed as written
    assert "## Linear classification (the paper's protocol, 100 epochs): embedded" in md
    skipped = next(line for line in result.output.splitlines() if line.startswith("skipped"))
    assert skipped.startswith("skipped 7: ") and "version2.result.json (unknown version 2" in skipped


def test_report_formats_option(tmp_path: Path, write_record: WriteRecord, runs: Path) -> None:
    write_record("a/result.json")
    result = runner.invoke(app, ["report", str(runs), "--out", str(tmp_path / "o"), "--formats", "md, csv"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["report.csv", "report.md"]
    assert "skipped: none" in result.output
    result = runner.invoke(app, ["report", str(runs), "--formats", "md,pdf"])
    assert result.exit_code == 2 and "error: --formats: unknown format pdf" in result.output


def test_report_user_errors_exit_2(tmp_path: Path, write_record: WriteRecord, runs: Path) -> None:
    result = runner.invoke(app, ["report", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "error: no such directory" in result.output
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["report", str(tmp_path / "empty")])
    assert result.exit_code == 2 and "error: no result records" in result.output
    write_record("bad.result.json", "{nope")
    result = runner.invoke(app, ["report", str(runs), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "none of the 1 records" in result.output and "malformed JSON" in result.output
    assert not (tmp_path / "o").exists()


def test_report_help_describes_options() -> None:
    result = runner.invoke(app, ["report", "--help"])
    assert result.exit_code == 0
    for text in ("--out", "--formats", "result.json"):
        assert text in result.output


def test_report_error_is_one_line_without_traceback(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "cli", "report", str(tmp_path / "nowhere")], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: no such directory: {tmp_path / 'nowhere'}"
