"""``moco report``: paper-style tables from the result records under some directories."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from moco_core.errors import print_error, print_warning
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
    only: Annotated[list[str] | None, typer.Option(
        "--only", help="Report only this study (repeatable): the names a report of several studies lists.")] = None,
    split: Annotated[bool, typer.Option(
        "--split", help="One report per study, each in OUT/<study>/, instead of one with a section each.")] = False,
    mix_marked: Annotated[bool, typer.Option(
        "--mix-marked", help="Put the rows of smoke runs (MOCO_SMOKE=1; marked \\[smoke]) and of unfinished "
        "pretrainings (stopped part-way; marked unfinished) in the tables of finished real runs, instead of tables "
        "of their own.")] = False,
    baseline: Annotated[str | None, typer.Option(
        "--baseline", help="The row each table's rows are compared with (difference, its standard error, a test): "
        "'random init' (the default), 'supervised', or a row's label as the tables show it.")] = None,
) -> None:
    """Paper-style tables (linear, kNN, VOC, COCO, ablations) from evaluation records, as Markdown, CSV, LaTeX and
    one self-contained HTML file with plots. The Markdown is also printed; skipped records are listed with why.
    Records of several studies (a moco demo, one's own data...) get a section each; smoke runs and unfinished
    pretrainings have tables apart."""
    from reports.comparisons import UnknownBaseline
    from reports.records import find_record_files
    from reports.render import skipped_line, to_markdown, write_report
    from reports.report import UnknownStudy, build_report, parse_formats, read_inputs

    try:
        chosen = parse_formats(formats)
    except ValueError as err:
        raise _fail(str(err)) from None
    missing = [r for r in results if not Path(r).exists()]
    if missing:
        raise _fail(f"no such directory: {', '.join(missing)}")
    if not find_record_files(results):
        raise _fail(f"no result records (result.json or *.result.json) under {', '.join(results)}")
    inputs = read_inputs(results)
    try:
        report = build_report(results, mix_marked=mix_marked, only=only or (), inputs=inputs, baseline=baseline)
    except (UnknownStudy, UnknownBaseline) as err:
        raise _fail(str(err)) from None
    if not report.records and not report.transfer:
        print(skipped_line(report.skipped), file=sys.stderr)
        raise _fail(f"none of the {len(report.skipped)} records under {', '.join(results)} could be used")
    if len(report.studies) > 1 and not only and not split:
        print(f"found {len(report.studies)} studies: {', '.join(repr(s.name) for s in report.studies)}; each has a "
              f"section of its own (--only NAME reports one, --split one report each)", file=sys.stderr)
    pages = [(report, Path(out))]
    if split:
        pages = [(build_report(results, mix_marked=mix_marked, only=[section.study.name], inputs=inputs,
                               baseline=baseline),
                  Path(out) / section.study.slug) for section in report.sections]
    written = []
    for page, where in pages:
        try:
            written += write_report(page, where, chosen,
                                    warn=print_warning)
        except OSError as err:  # written as a set: nothing of the new report is there, the previous one is whole
            raise _fail(f"cannot write the report to {where}: {err.strerror or err}; nothing was changed there "
                        f"(the previous report, if any, is whole)") from None
        print(to_markdown(page))
    print(skipped_line(report.skipped))
    print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
