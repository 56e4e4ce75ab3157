"""``moco report``: paper-style tables from the result records under some directories."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from moco_core.errors import print_error
from reports import FORMATS


def _fail(message: str) -> typer.Exit:
    print_error(message)
    return typer.Exit(2)


def report_cli(
    results: Annotated[list[str], typer.Argument(
        help="Directories to search (recursively) for result.json and *.result.json records.")],
    out: Annotated[str, typer.Option("--out", "-o", help="Directory the report files are written to.")] = "report",
    formats: Annotated[str, typer.Option(
        help=f"Comma-separated output formats, a subset of {','.join(FORMATS)}.")] = ",".join(FORMATS),
) -> None:
    """Paper-style tables (linear, kNN, VOC, COCO, ablations) from evaluation records, as Markdown, CSV, LaTeX and
    one self-contained HTML file with plots. The Markdown is also printed; skipped records are listed with why."""
    from reports.records import find_record_files
    from reports.render import skipped_line, to_markdown, write_report
    from reports.report import build_report, parse_formats

    try:
        chosen = parse_formats(formats)
    except ValueError as err:
        raise _fail(str(err)) from None
    missing = [r for r in results if not Path(r).exists()]
    if missing:
        raise _fail(f"no such directory: {', '.join(missing)}")
    if not find_record_files(results):
        raise _fail(f"no result records (result.json or *.result.json) under {', '.join(results)}")
    report = build_report(results)
    if not report.records and not report.transfer:
        print(skipped_line(report.skipped), file=sys.stderr)
        raise _fail(f"none of the {len(report.skipped)} records under {', '.join(results)} could be used")
    try:
        written = write_report(report, Path(out), chosen)
    except OSError as err:
        raise _fail(f"cannot write the report to {out}: {err}") from None
    print(to_markdown(report))
    print(skipped_line(report.skipped))
    print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
