"""Rendering a report as Markdown, CSV (tidy, long form), LaTeX (booktabs) and one self-contained HTML file.

Every string that comes from a record (labels, paths, class names, failure reasons) is escaped for the format it
goes into: control characters shown as their escapes in every format (``reports.safe_text``), then backslash
escapes in Markdown (and newlines folded, which would break a table row), LaTeX's special characters replaced by
their commands, HTML's by entities; CSV cells are all quoted and a cell that would start a spreadsheet formula is
neutralised (OWASP's CSV-injection guidance). The HTML embeds its CSS and its PNG plots (base64 data URIs): it
loads nothing from anywhere.
"""

from __future__ import annotations

import base64
import csv
import html
import io
from collections.abc import Callable, Sequence
from pathlib import Path

from moco_core.file_sets import write_set
from reports.records import Skipped
from reports.report import CSV_COLUMNS, FILE_NAMES, Curve, Report
from reports.safe_text import csv_cell, printable
from reports.tables import Cell, Column, Row

TITLE = "MoCo evaluation report"
MEANS = "Values are the mean ± sample standard deviation over n trials (a single trial: its value)"
DELTAS = "differences to the supervised row are in parentheses"
MARKED = ("Failed runs are marked and never averaged; published numbers are marked as such and never mixed into our "
          "means.")
MD_SPECIAL = frozenset("\\`*_[]<>#|~^&$")
LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
    "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}", ">": r"\textgreater{}",
    "|": r"\textbar{}", '"': r"\textquotedbl{}", "`": r"\textasciigrave{}", "[": "{[}", "]": "{]}",
}


def one_line(text: str) -> str:
    """Newlines (and other line breaks) folded into spaces."""
    return " ".join(text.splitlines()) if text else text


def records_line(report: Report) -> str:
    skipped = f"{len(report.skipped)} skipped (listed at the end)" if report.skipped else "none skipped"
    suites = f" and {len(report.transfer)} transfer suite runs" if report.transfer else ""
    return f"{len(report.records)} records{suites} read from {', '.join(report.roots)}; {skipped}."


def values_note(report: Report) -> str:
    """What the cells hold, promising only what the tables show: differences in parentheses where a table has
    them, smoke runs where there are some."""
    deltas = any(cell.delta is not None for t in report.tables for row in t.rows for cell in row.cells)
    text = (f"{MEANS}; {DELTAS}." if deltas else f"{MEANS}.") + " " + MARKED
    smoke = sum(r.smoke for r in report.records)
    if smoke:
        text += (f" {smoke} of the {len(report.records)} records are of smoke runs (MOCO_SMOKE=1): their numbers mean "
                 f"nothing, and their rows say [smoke].")
    suites = sum(t.smoke for t in report.transfer)
    if suites:
        text += (f" {suites} of the {len(report.transfer)} transfer suite runs are smoke runs (MOCO_SMOKE=1, or of "
                 f"weights a smoke run made): their rows say [smoke].")
    return text


def studies_line(report: Report) -> str | None:
    """With several studies: which, each with its records (``moco report --only NAME`` reports one)."""
    if len(report.studies) < 2:
        return None
    found = "; ".join(f"{s.name} ({s.description}" + (f"; {len(s.records)} records)" if s.records else ")")
                      for s in report.studies)  # a transfer study counts its suite runs in its description
    shown = "" if len(report.sections) == len(report.studies) else \
        f" This report holds {', '.join(s.study.name for s in report.sections)}."
    return (f"{len(report.studies)} studies found, each in a section of its own: {found}.{shown} moco report --only "
            f"NAME reports one, --split one page each.")


def skipped_line(skipped: list[Skipped]) -> str:
    """The one line printed after the Markdown: every skipped file with its reason."""
    if not skipped:
        return "skipped: none"
    return f"skipped {len(skipped)}: " + "; ".join(f"{s.path} ({one_line(s.reason)})" for s in skipped)


# -------------------------------------------------------------------------------------------------------- Markdown


def md_escape(text: str) -> str:
    return "".join("\\" + ch if ch in MD_SPECIAL else ch for ch in printable(one_line(text), newlines=False))


def md_table(columns: tuple[Column, ...], rows: list[list[str]]) -> list[str]:
    """A GitHub-flavoured Markdown table, padded to column width; cells must already be escaped."""
    header = [md_escape(c.name) for c in columns]
    widths = [max(3, len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        padded = [c.rjust(w) if col.numeric else c.ljust(w) for c, w, col in zip(cells, widths, columns, strict=True)]
        return "| " + " | ".join(padded) + " |"

    rule = "| " + " | ".join("-" * (w - 1) + ":" if c.numeric else "-" * w for c, w in zip(columns, widths,
                                                                                           strict=True)) + " |"
    return [line(header), rule, *(line(r) for r in rows)]


def to_markdown(report: Report) -> str:
    out = [f"# {TITLE}", "", md_escape(records_line(report)), "", md_escape(values_note(report)), ""]
    studies = studies_line(report)
    if studies:
        out += [md_escape(studies), ""]
    several = len(report.sections) > 1
    for section in report.sections:
        if several:
            out += [f"## Study: {md_escape(section.study.name)}", "", md_escape(section.study.description), ""]
        for table in section.tables:
            out += [f"{'###' if several else '##'} {md_escape(table.title)}", ""]
            if table.subtitle:
                out += [md_escape(table.subtitle), ""]
            out += md_table(table.columns, [[md_escape(c.plain()) for c in row.cells] for row in table.rows])
            out.append("")
            if table.notes:
                out += [f"- {md_escape(n)}" for n in table.notes] + [""]
    if report.skipped:
        out += ["## Skipped records", ""]
        out += md_table((Column("File"), Column("Reason")),
                        [[md_escape(s.path), md_escape(s.reason)] for s in report.skipped])
        out.append("")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------------------- CSV


def to_csv(report: Report) -> str:
    """Every cell quoted (a carriage return or line feed in a field cannot end its row), formulas neutralised."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n", quoting=csv.QUOTE_ALL)
    writer.writeheader()
    writer.writerows({column: csv_cell(value) for column, value in row.items()} for row in report.tidy)
    return buf.getvalue()


# ----------------------------------------------------------------------------------------------------------- LaTeX


def latex_escape(text: str) -> str:
    return "".join(LATEX_SPECIAL.get(ch, ch) for ch in printable(one_line(text), newlines=False))


def latex_cell(cell: Cell) -> str:
    text = latex_escape(cell.text)
    if cell.std is not None:
        text += r" $\pm$ " + latex_escape(cell.std)
    if cell.delta is not None:
        delta = f"({latex_escape(cell.delta)})"
        text += " " + (rf"\textcolor{{{'gain' if cell.sign > 0 else 'loss'}}}{{{delta}}}" if cell.sign else delta)
    return text


def latex_table(columns: tuple[Column, ...], rows: list[list[str]], spec: str | None = None) -> list[str]:
    spec = spec or "".join("r" if c.numeric else "l" for c in columns)
    return [r"\begin{center}\small", rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
            " & ".join(latex_escape(c.name) for c in columns) + r" \\", r"\midrule",
            *(" & ".join(r) + r" \\" for r in rows), r"\bottomrule", r"\end{tabular}", r"\end{center}"]


def to_latex(report: Report) -> str:
    out = [r"\documentclass{article}", r"\usepackage[T1]{fontenc}", r"\usepackage[utf8]{inputenc}",
           r"\usepackage{textcomp}", r"\usepackage{booktabs}", r"\usepackage{xcolor}",
           r"\usepackage[margin=1.5cm,landscape]{geometry}", r"\definecolor{gain}{HTML}{2E7D32}",
           r"\definecolor{loss}{HTML}{9E3A3A}", r"\begin{document}", rf"\section*{{{latex_escape(TITLE)}}}",
           latex_escape(records_line(report)) + r"\par", latex_escape(values_note(report)) + r"\par", ""]
    studies = studies_line(report)
    if studies:
        out += [latex_escape(studies) + r"\par", ""]
    several = len(report.sections) > 1
    for section in report.sections:
        if several:
            out += [rf"\subsection*{{Study: {latex_escape(section.study.name)}}}",
                    latex_escape(section.study.description) + r"\par"]
        for table in section.tables:
            out.append(rf"\{'subsubsection' if several else 'subsection'}*{{{latex_escape(table.title)}}}")
            if table.subtitle:
                out.append(latex_escape(table.subtitle) + r"\par")
            body = [[(r"\textit{" + latex_cell(c) + "}") if row.kind in ("published", "secondary") and i == 0
                     else latex_cell(c) for i, c in enumerate(row.cells)] for row in table.rows]
            out += latex_table(table.columns, body)
            if table.notes:
                out += [r"\begin{itemize}", *(rf"\item {latex_escape(n)}" for n in table.notes), r"\end{itemize}"]
            out.append("")
    if report.skipped:
        out.append(r"\subsection*{Skipped records}")
        out += latex_table((Column("File"), Column("Reason")),
                           [[latex_escape(s.path), latex_escape(s.reason)] for s in report.skipped],
                           r"p{0.4\linewidth}p{0.5\linewidth}")
    out += [r"\end{document}", ""]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------------------ HTML

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1150px;
       color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ddd; }
h2.study { font-size: 1.4em; margin-top: 2.5em; border-bottom: 2px solid #222; }
h3 { font-size: 1.05em; margin-top: 1.8em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { padding: 0.25em 0.7em; text-align: left; vertical-align: top; }
thead th { border-top: 2px solid #222; border-bottom: 1px solid #222; }
tbody tr:last-child td { border-bottom: 2px solid #222; }
td.num, th.num { text-align: right; white-space: nowrap; }
tr.published td, tr.secondary td { font-style: italic; color: #444; background: #f6f6f6; }
tr.failed td { color: #9e3a3a; }
tbody td:first-child { white-space: nowrap; }
tr:not(.published):not(.secondary) + tr.published td, tr:not(.published):not(.secondary) + tr.secondary td {
  border-top: 1px solid #999; }
.gain { color: #2e7d32; font-weight: 600; } .loss { color: #9e3a3a; } .zero { color: #777; }
.sub { color: #555; font-size: 0.9em; } ul.notes { color: #555; font-size: 0.85em; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.85em; }
"""


def h(text: str) -> str:
    return html.escape(printable(text), quote=True)


def html_cell(cell: Cell) -> str:
    text = h(cell.text)
    if cell.std is not None:
        text += f" ± {h(cell.std)}"
    if cell.delta is not None:
        css = "gain" if cell.sign > 0 else "loss" if cell.sign < 0 else "zero"
        text += f' <span class="{css}">({h(cell.delta)})</span>'
    return text


def html_table(columns: tuple[Column, ...], rows: list[Row]) -> list[str]:
    def cls(col: Column) -> str:
        return ' class="num"' if col.numeric else ""

    head = "".join(f"<th{cls(c)}>{h(c.name)}</th>" for c in columns)
    body = [f'<tr class="{h(row.kind)}">' + "".join(f"<td{cls(col)}>{html_cell(cell)}</td>"
                                                     for cell, col in zip(row.cells, columns, strict=True)) + "</tr>"
            for row in rows]
    return ["<table>", f"<thead><tr>{head}</tr></thead>", "<tbody>", *body, "</tbody>", "</table>"]


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def figure(png: bytes, caption: str) -> str:
    return (f'<figure><img src="{data_uri(png)}" alt="{h(caption)}">'
            f"<figcaption>{h(caption)}</figcaption></figure>")


def to_html(report: Report, warn: Callable[[str], None] = lambda line: None) -> str:
    """The HTML report; ``warn`` is told, in one line each, of a metrics.jsonl not read or read in part."""
    from reports import plots

    out = ['<!DOCTYPE html>', '<html lang="en">', "<head>", '<meta charset="utf-8">', f"<title>{h(TITLE)}</title>",
           f"<style>{CSS}</style>", "</head>", "<body>", f"<h1>{h(TITLE)}</h1>",
           f'<p class="sub">{h(records_line(report))}</p>', f'<p class="sub">{h(values_note(report))}</p>']
    studies = studies_line(report)
    if studies:
        out.append(f'<p class="sub">{h(studies)}</p>')
    several = len(report.sections) > 1
    head = "h3" if several else "h2"
    for section in report.sections:
        if several:
            out += [f'<h2 class="study">Study: {h(section.study.name)}</h2>',
                    f'<p class="sub">{h(section.study.description)}</p>']
        for table in section.tables:
            out += ["<section>", f"<{head}>{h(table.title)}</{head}>"]
            if table.subtitle:
                out.append(f'<p class="sub">{h(table.subtitle)}</p>')
            out += html_table(table.columns, table.rows)
            if table.notes:
                out += ['<ul class="notes">', *(f"<li>{h(n)}</li>" for n in table.notes), "</ul>"]
            if table.ablation is not None and plots.ablation_points(table.ablation) > 1:  # a plot of one point: none
                out.append(figure(plots.ablation_png(table.ablation), table.ablation.title))
            out.append("</section>")
        if section.curves:
            out += _curves_html(section.curves, head, warn)
    if report.skipped:
        out += ["<section>", "<h2>Skipped records</h2>",
                *html_table((Column("File"), Column("Reason")),
                            [Row((Cell(s.path), Cell(s.reason)), "failed") for s in report.skipped]),
                "</section>"]
    out += ["</body>", "</html>", ""]
    return "\n".join(out)


def _curves_html(found: list[Curve], head: str, warn: Callable[[str], None]) -> list[str]:
    """The pretraining curves of one study: a figure per run that logged two points or more (a plot of one point
    shows nothing: said in a line instead), captioned with the metrics file's path as the report's reader has it;
    ``warn`` is told, in one line each, of a metrics.jsonl not read or read in part."""
    from reports import plots

    out = ["<section>", f"<{head}>Pretraining curves</{head}>",
           '<p class="sub">From each pretraining run\'s metrics.jsonl (beside its checkpoint).</p>']
    single = []
    for curve in found:
        curves = plots.read_curves(curve.path)
        if curves.problem or curves.unreadable:
            warn(curves.problem or f"{curve.path}: {curves.unreadable} unreadable lines skipped (each not a JSON "
                                   f"object, or a number beyond 64-bit integers and floats)")
        if curves.empty:
            continue
        if plots.most_points(curves, curve.linear) < 2:
            single.append(f"{curve.label} ({curve.shown})")
            continue
        note = f" ({curves.unreadable} unreadable lines skipped)" if curves.unreadable else ""
        png = plots.curves_png(curve.label, curves, supervised=curve.supervised, linear=curve.linear,
                               linear_label=curve.linear_label)
        out.append(figure(png, f"{curve.label}: {curve.shown}{note}"))
    if single:
        out.append(f'<p class="sub">{h("One point logged, nothing to plot: " + "; ".join(single))}.</p>')
    return [*out, "</section>"]


def write_report(report: Report, out: Path, formats: Sequence[str],
                 warn: Callable[[str], None] = lambda line: None) -> list[Path]:
    """Write report.<format> for each format into ``out`` as one set (:func:`moco_core.file_sets.write_set`): every
    file is rendered, then written under a temporary name, then renamed; a write that fails (a full disk) leaves the
    previous report whole. The report files of formats not asked for are removed with it: the folder never holds
    a report.md of this report beside a report.html of an earlier one. Returns the files written."""
    writers = {"md": to_markdown, "csv": to_csv, "tex": to_latex, "html": lambda r: to_html(r, warn)}
    texts = {FILE_NAMES[fmt]: writers[fmt](report).encode("utf-8") for fmt in formats}
    write_set(out, texts, remove=[name for name in FILE_NAMES.values() if name not in texts])
    return [out / name for name in texts]
