"""Tables like the paper's, as plain data (cells of text, standard deviation and difference); the renderers in
``reports.render`` turn them into Markdown, LaTeX and HTML, escaping every string there.

* Classification (linear, kNN): top-1 and top-5 per pretraining, one table per protocol and evaluation dataset.
* VOC detection: AP50, AP, AP75 with the difference to the supervised row; per-class AP50 when records carry it.
* COCO: box and mask AP, AP50, AP75 per detector model and schedule, with the difference to the supervised row.
* Semi-supervised: the classification tables of runs on a subset of the train labels (1%, 10%, a subset file),
  one column pair per subset (SimCLR's Table 7 layout).
* Semantic segmentation (VOC12, Cityscapes): mIoU and pixel accuracy per dataset, network and schedule, with the
  difference to the supervised row.
* Ablations: accuracy against the queue size K or the momentum m, per mechanism: the trials of a point (other
  seeds) as mean ± std and n; failed runs marked.

Titles name what ran (``reports.protocols``); the linear and kNN tables give chance level, and a table without a
random-init row says how to add one (``reports.hints``). A row of smoke runs (``MOCO_SMOKE=1``) says so after its
label (a pretraining stopped part-way says "unfinished" in its label), and its table is one of such rows unless
the report was asked to mix them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from itertools import groupby
from typing import Any

from reports.comparisons import (
    COMPARISON_NOTE,
    Comparison,
    column_header,
    compare_entries,
    entry_baselines,
    margins_over_random,
)
from reports.expected import FLOOR, WIDTH, Expected, flags, load_expected
from reports.hints import random_init_hint
from reports.pretraining import method_name, published_backbone, short_arch
from reports.protocols import (
    DETECTION_TASKS,
    SMOKE_NOTE,
    UNFINISHED_NOTE,
    chance_note,
    setting_subtitle,
    setting_title,
)
from reports.published import PublishedRow, beside, matching, matching_momentum
from reports.records import OPTIONAL_METRICS, RETRIEVAL_METRIC, TASK_METRICS
from reports.summary import (
    Entry,
    Setting,
    Stat,
    delta,
    label_order,
    pretraining_identity,
    supervised_reference,
)

MISSING = "–"
METRIC_HEADERS = {"top1": "top-1", "top5": "top-5", "AP50": "AP50", "AP": "AP", "AP75": "AP75",
                  "bbox_AP": "APbb", "bbox_AP50": "APbb50", "bbox_AP75": "APbb75",
                  "segm_AP": "APmk", "segm_AP50": "APmk50", "segm_AP75": "APmk75",
                  "keypoints_AP": "APkp", "keypoints_AP50": "APkp50", "keypoints_AP75": "APkp75", "mIoU": "mIoU",
                  "dp_gps_AP": "APdp", "dp_gps_AP50": "APdp50", "dp_gps_AP75": "APdp75", "dp_gpsm_AP": "APdp (GPSm)",
                  "pixel_acc": "pixel acc.", "imagenet_v2_top1": "IN-V2", "imagenet_a_top1": "IN-A",
                  "imagenet_r_top1": "IN-R", "imagenet_sketch_top1": "IN-Sketch", "imagenet_real_top1": "IN-ReaL"}
RETRIEVAL_PROTOCOLS = ("medium", "hard")  # a retrieval table's, in revisitop's order
RETRIEVAL_DATASETS = {"roxford5k": "rOxford5k", "rparis6k": "rParis6k"}  # as revisitop writes their names
SWEEP_HEADERS = {"queue_size": "K", "momentum": "m"}
SWEEP_TITLES = {"queue_size": "queue size K", "momentum": "momentum m"}
# MoCo v3's curves are tables of their own: its m is where a schedule starts, v1/v2's a constant (a table per
# parameter, setting and family).
V3_MOMENTUM_NOTE = ("MoCo v3's m (v3.momentum) is the momentum at the start: with v3.momentum_cos, on in every "
                    "official setup, it rises to 1 along a half cosine over the run; MoCo v1/v2's m stays constant, "
                    "so their curves are in a table of their own.")
DELTA_TASKS = (*DETECTION_TASKS, "semseg")


@dataclass(frozen=True)
class Cell:
    """One table cell: text, and for numbers an optional standard deviation and signed difference."""

    text: str
    std: str | None = None
    delta: str | None = None  # "+0.9", "-1.2", "0.0"
    sign: int = 0  # +1 gain, -1 loss, 0 neither

    def plain(self) -> str:
        """The cell as unescaped text: "55.9 ± 0.2 (+2.4)"."""
        text = self.text
        if self.std is not None:
            text += f" ± {self.std}"
        if self.delta is not None:
            text += f" ({self.delta})"
        return text


@dataclass(frozen=True)
class Column:
    name: str
    numeric: bool = False


@dataclass(frozen=True)
class Row:
    cells: tuple[Cell, ...]
    kind: str = "ours"  # "ours", "published", "secondary", "failed"


@dataclass
class AblationPoint:
    value: float
    mean: float | None  # None for a failed point
    std: float | None  # sample std of the point's trials; None for one trial
    failed: bool = False
    n: int = 1


@dataclass
class AblationData:
    """The numbers behind an ablation plot: one series per mechanism (and published rows, if any)."""

    param: str
    title: str
    metric: str
    series: dict[str, list[AblationPoint]] = field(default_factory=dict)


@dataclass
class Table:
    key: str
    title: str
    columns: tuple[Column, ...]
    rows: list[Row]
    subtitle: str = ""
    notes: list[str] = field(default_factory=list)
    ablation: AblationData | None = None


@dataclass
class Shown:
    """Published rows shown in a table (for the CSV), with the table's key and setting."""

    key: str
    setting: Setting
    rows: list[PublishedRow]
    sweep_param: str | None = None


def round1(value: float) -> Decimal:
    """One decimal, ties away from zero on the shortest decimal form (16.75 -> 16.8, as one would by hand)."""
    return Decimal(repr(value)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)


def fmt(value: float) -> str:
    text = f"{round1(value):.1f}"
    return "0.0" if text == "-0.0" else text


def fmt_delta(value: float) -> tuple[str, int]:
    """"+0.9" (gain), "-0.3" (loss), "0.0" where it rounds to zero."""
    rounded = round1(value)
    if rounded == 0:
        return "0.0", 0
    return f"{rounded:+.1f}", 1 if rounded > 0 else -1


def p_text(p: float) -> str:
    """"p=0.013", "p<0.001"."""
    return "p<0.001" if p < 0.001 else f"p={p:.2g}"


def comparison_text(c: Comparison) -> str:
    """A row against its baseline, direction and size first: "+3.2 ± 0.8, p=0.01 (Welch, 3 v 3 trials)"; a row of
    one trial "+3.2 (1 trial)" (no spread, never a standard error of 0); a paired test "+3.2, p=0.03 (exact
    McNemar over the test images; 1 trial)"."""
    diff = fmt_delta(c.difference)[0]
    if c.se is None:
        ones = "1 trial" if c.n == 1 else f"baseline: 1 trial, {c.n} here"
        return f"{diff} ({ones})" if c.p is None else f"{diff}, {p_text(c.p)} ({c.test}; {ones})"
    counts = f"{c.n} v {c.baseline_n} {c.unit}"
    if c.p is None:  # both rows' trials agree exactly: no test can be made
        return f"{diff} ± {fmt(c.se)} ({counts}, no spread)"
    return f"{diff} ± {fmt(c.se)}, {p_text(c.p)} ({c.test}, {counts})"


def comparison_cell(c: Comparison | None, *, is_baseline: bool = False) -> Cell:
    if is_baseline:
        return Cell("baseline")
    return Cell(MISSING) if c is None else Cell(comparison_text(c))


def fmt_sweep(value: float) -> str:
    """4096 for K, 0.999 for m, 0 for m = 0."""
    return str(int(value)) if value == int(value) else f"{value:g}"


def _with_spread(entry: Entry, metrics: tuple[str, ...], cells: tuple[Cell, ...]) -> tuple[Cell, ...]:
    """A one-trial few-shot row's cells with the spread over its tries (the record's; d564f78 dropped it)."""
    return tuple(dataclasses.replace(c, std=fmt(entry.spread[m][0])) if m in entry.spread and c.std is None else c
                 for c, m in zip(cells, metrics, strict=True))


def _tries_note(entry: Entry) -> str:
    tries = sorted({t for _, t in entry.spread.values()})
    return f"± over {'/'.join(map(str, tries))} tries of the shots drawn" if tries else ""


def stat_cell(stat: Stat | None, diff: float | None = None) -> Cell:
    if stat is None or stat.n == 0:
        return Cell(MISSING)
    std = stat.std
    delta_text, sign = fmt_delta(diff) if diff is not None else (None, 0)
    return Cell(fmt(stat.mean), fmt(std) if std is not None else None, delta_text, sign)


def value_cell(value: float | None, diff: float | None = None) -> Cell:
    if value is None:
        return Cell(MISSING)
    delta_text, sign = fmt_delta(diff) if diff is not None else (None, 0)
    return Cell(fmt(value), None, delta_text, sign)


def failure_note(entry: Entry) -> str:
    if not entry.failures:
        return ""
    reasons = "; ".join(dict.fromkeys(entry.failures))
    if entry.failed:
        return f"failed: {reasons}"
    total = entry.n + len(entry.failures)
    return f"{len(entry.failures)} of {total} trials failed (not in the mean): {reasons}"


SMOKE_MARK = " [smoke]"


def row_label(entry: Entry, text: str) -> Cell:
    """The first cell of ``entry``'s row: ``text``, marked where its trials are smoke runs."""
    return Cell(text + (SMOKE_MARK if entry.smoke else ""))


def checked_flags(entry: Entry, expected: dict[tuple[str, ...], dict[str, Expected]]) -> tuple[list[str], bool]:
    """:func:`reports.expected.flags`, for real runs only: a smoke run's numbers have no expected range."""
    return ([], False) if entry.smoke else flags(entry, expected)


def source_note(row: PublishedRow) -> str:
    return f"source: {row.source}" + (" (secondary: re-typed copy of the paper)" if row.secondary else "")


# ----------------------------------------------------------------------------------------------------- main tables


def main_tables(entries: list[Entry], published: list[PublishedRow],
                expected: dict[tuple[str, ...], dict[str, Expected]] | None = None,
                baseline: str | None = None) -> tuple[list[Table], list[Shown]]:
    """One table per setting (and a per-class AP50 table for VOC where records carry it). ``expected``
    (reports/expected.csv by default): rows outside the expected range of their preset are flagged. ``baseline``:
    the row each row is compared with (reports.comparisons; random init by default)."""
    expected = load_expected() if expected is None else expected
    tables: list[Table] = []
    shown: list[Shown] = []
    semi = [e for e in entries if e.setting.labels is not None]
    entries = [e for e in entries if e.setting.labels is None]
    for setting, group in groupby(entries, key=lambda e: e.setting):
        rows_of = list(group)
        pub = matching(setting, {e.pretraining.arch for e in rows_of}, published,
                       {m for e in rows_of for m in e.metrics})
        tables.append(_setting_table(setting, rows_of, pub, expected, published, baseline))
        if pub:
            shown.append(Shown(setting.key, setting, pub))
        if any(e.per_class for e in rows_of):
            tables.append(_per_class_table(setting, rows_of))
    return tables + semi_supervised_tables(semi, expected), shown


# ---------------------------------------------------------------------------------------------- semi-supervised

SEMI_NOTE = ("Each column trains on a subset of the train labels: a class-balanced fraction (round(f n_c) of each "
             "class, at least 1, drawn with data.subset_seed, 0 unless the column names another), or the images a "
             "file names (SimCLR's imagenet_subsets format), shown with its SHA-256's first six hex digits. "
             "Validation is on the whole val split. reports/published.csv holds no semi-supervised numbers: the MoCo "
             "paper (arXiv 1911.05722) reports none.")


def semi_supervised_tables(entries: list[Entry],
                           expected: dict[tuple[str, ...], dict[str, Expected]]) -> list[Table]:
    """One table per setting less its labels (task, protocol, data, length), SimCLR's Table 7 layout (arXiv
    2002.05709): a row per pretraining, top-1 and top-5 under each label fraction ("1%", "10%") or subset file."""
    by_setting: dict[Setting, list[Entry]] = {}
    for entry in entries:
        by_setting.setdefault(dataclasses.replace(entry.setting, labels=None), []).append(entry)
    return [_semi_table(base, rows, expected) for base, rows in by_setting.items()]


def _semi_table(base: Setting, entries: list[Entry], expected: dict[tuple[str, ...], dict[str, Expected]]) -> Table:
    metrics = TASK_METRICS[base.task]
    labels = sorted({e.setting.labels for e in entries if e.setting.labels}, key=label_order)
    cells: dict[tuple[Any, ...], dict[str, Entry]] = {}
    for entry in sorted(entries, key=lambda e: e.pretraining.sort_key()):
        cells.setdefault(pretraining_identity(entry.pretraining), {})[entry.setting.labels or ""] = entry
    rows: list[Row] = []
    notes: list[str] = [SEMI_NOTE]
    checked = False
    for by_label in cells.values():
        first = next(iter(by_label.values()))
        values: list[Cell] = []
        row_notes: list[str] = []
        for label in labels:
            entry = by_label.get(label)
            if entry is None:
                values += [Cell(MISSING) for _ in metrics]
                continue
            values += [Cell("failed") if entry.failed else stat_cell(entry.metrics.get(m)) for m in metrics]
            outside, applied = checked_flags(entry, expected)
            checked |= applied
            row_notes += [f"{label}: {n}" for n in (failure_note(entry), *outside) if n]
        counts = ", ".join(str(by_label[label].n) if label in by_label else MISSING for label in labels)
        failed = all(e.failed for e in by_label.values())
        rows.append(Row((row_label(first, first.pretraining.label), Cell(counts), *values, Cell("; ".join(row_notes))),
                        "failed" if failed else "ours"))
    for label in labels:
        column = [e for e in entries if e.setting.labels == label]
        margins = margins_over_random(column, metrics[0])
        if margins:
            header = METRIC_HEADERS.get(metrics[0], metrics[0])
            notes.append(f"Above random init ({label} {header}; SE, the standard error of the difference of the two "
                         "means): " + "; ".join(f"{m.entry.pretraining.label} {fmt_delta(m.difference)[0]} "
                                                f"({m.ratio:.1f} SE)" for m in margins) + ".")
    notes += [n for n in (chance_note(base),) if n]
    lacking = [label for label in labels if not any(e.pretraining.kind == "random" and e.setting.labels == label
                                                    for e in entries)]
    if lacking and base.mark != "unfinished":  # a column's random-init command runs on that column's labels
        notes.append(random_init_hint(base, [e for e in entries if e.setting.labels in lacking]))
    if base.smoke or any(e.smoke for e in entries):
        notes.append(SMOKE_NOTE)
    if checked:
        notes.append(f"Expected ranges of these presets (reports/expected.csv, measured with several trials): a mean "
                     f"more than max({WIDTH:g} std, {FLOOR:g}) from the expected one is flagged in its note.")
    columns = (Column("Pretraining"), Column("n", True),
               *(Column(f"{label} {METRIC_HEADERS.get(m, m)}", True) for label in labels for m in metrics),
               Column("Note"))
    title = f"Semi-supervised, {' / '.join(labels)} of the labels: {setting_title(base)}"
    return _drop_empty_note(Table(f"semi:{base.key}", title, columns, rows, setting_subtitle(base), notes))


def _setting_table(setting: Setting, entries: list[Entry], pub: list[PublishedRow],
                   expected: dict[tuple[str, ...], dict[str, Expected]],
                   published: list[PublishedRow] | None = None, baseline: str | None = None) -> Table:
    metrics = TASK_METRICS[setting.task] + tuple(m for m in OPTIONAL_METRICS.get(setting.task, ())
                                                 if any(m in e.metrics for e in entries))
    if setting.task == "fewshot":  # the k the rows ran, in their order (the records list them by k, linear first)
        metrics = tuple(dict.fromkeys(m for e in entries for m in e.metrics))
    if setting.task == "retrieval":
        metrics = retrieval_columns(entries)
    reference, ref_note = supervised_reference(entries) if setting.task in DELTA_TASKS else (None, "")
    rows: list[Row] = []
    notes: list[str] = []
    checked = False
    own = {id(e): beside(setting, e.pretraining.method, published_backbone(e.pretraining.arch,
                                                                            e.pretraining.registers), published or [])
           for e in entries}
    extra = any(own.values())  # a "published" column where a row of another method has its number
    bases = entry_baselines(entries, baseline)
    compared = compared_metrics(setting.task, metrics) if any(bases) else ()
    for entry, base in zip(entries, bases, strict=True):
        if entry.failed:
            values = tuple(Cell("failed") for _ in metrics)
        else:
            values = _with_spread(entry, metrics, tuple(stat_cell(entry.metrics.get(m), delta(entry, reference, m))
                                                        for m in metrics))
        outside, applied = checked_flags(entry, expected)
        checked |= applied
        mine = own[id(entry)]
        note = "; ".join(n for n in (failure_note(entry), *outside, chosen_note(entry), _beside_note(mine),
                                     _tries_note(entry)) if n)
        shown = (value_cell(mine.values.get(metrics[0])) if mine else Cell(MISSING),) if extra else ()
        versus = tuple(comparison_cell(compare_entries(entry, base, m), is_baseline=any(entry is b for b in bases))
                       for m in compared)
        rows.append(Row((row_label(entry, entry.pretraining.label), Cell(str(entry.n)), *values, *versus, *shown,
                         Cell(note)), "failed" if entry.failed else "ours"))
    for row in pub:
        values = tuple(value_cell(row.values.get(m), row.deltas.get(m)) for m in metrics)
        shown = (Cell(MISSING),) * (len(compared) + extra)
        rows.append(Row((Cell(row.label), Cell(MISSING), *values, *shown, Cell(source_note(row))),
                        "secondary" if row.secondary else "published"))
    if setting.task in DELTA_TASKS:
        notes.append(ref_note)
    notes += [n for n in (chance_note(setting),) if n]
    if setting.mark == "unfinished":  # their floor is in the finished runs' table: random init is never unfinished
        notes.append(UNFINISHED_NOTE)
    elif not any(e.pretraining.kind == "random" for e in entries):
        notes.append(random_init_hint(setting, entries))
    if setting.smoke or any(e.smoke for e in entries):
        notes.append(SMOKE_NOTE)
    if pub:
        notes.append("Published rows (published.csv) match this setting; they are not part of our means, and their "
                     "differences are to the published supervised row.")
    margins = margins_over_random(entries, metrics[0]) if metrics else []
    if margins:
        header = metric_header(metrics[0])
        notes.append(f"Above random init ({header}; SE, the standard error of the difference of the two means, "
                     "from each row's trials): " + "; ".join(
                         f"{m.entry.pretraining.label} {fmt_delta(m.difference)[0]} ({m.ratio:.1f} SE)"
                         for m in margins) + ".")
    if checked:
        notes.append(f"Expected ranges of these presets (reports/expected.csv, measured with several trials): a mean "
                     f"more than max({WIDTH:g} std, {FLOOR:g}) from the expected one is flagged in its note.")
    if extra:
        notes.append("The published column: each method's own number for that backbone (reports/published.csv; its "
                     "source in the row's note), from the method's own evaluation protocol, beside the rows of that "
                     "method; not part of our means.")
    if compared:
        notes.append(COMPARISON_NOTE)
    columns = (Column("Pretraining"), Column("n", True), *(Column(metric_header(m), True) for m in metrics),
               *(Column(column_header(baseline, metric_header(m)), True) for m in compared),
               *((Column(f"published {metric_header(metrics[0])}", True),) if extra else ()), Column("Note"))
    return _drop_empty_note(Table(setting.key, setting_title(setting), columns, rows, setting_subtitle(setting),
                                  notes))


def compared_metrics(task: str, metrics: tuple[str, ...]) -> tuple[str, ...]:
    """The metrics a table compares its rows on: every k and reader of a few-shot table, else its first (top-1,
    AP50, mIoU); the CSV compares every metric."""
    return metrics if task == "fewshot" else metrics[:1]


def _beside_note(row: PublishedRow | None) -> str:
    if row is None:
        return ""
    return f"published: {row.pretrain} ({row.schedule}), {source_note(row)}"


def retrieval_columns(entries: list[Entry]) -> tuple[str, ...]:
    """A retrieval table's columns: each dataset's Medium and Hard mAP, the protocols revisitop's paper and DINOv2
    report (Easy, and mP@k, are the CSV's: the first column, the one rows are compared on, is a Medium mAP where
    one ran), the datasets in the rows' order."""
    found = [m for m in map(RETRIEVAL_METRIC.fullmatch, dict.fromkeys(n for e in entries for n in e.metrics))
             if m and m[4] == "map" and m[3] in RETRIEVAL_PROTOCOLS]
    datasets = list(dict.fromkeys(m[1] for m in found))
    return tuple(m[0] for m in sorted(found, key=lambda m: (datasets.index(m[1]), RETRIEVAL_PROTOCOLS.index(m[3]))))


def metric_header(name: str) -> str:
    """A column's header: METRIC_HEADERS', a few-shot metric's ("5-shot linear", "5-shot kNN"), or a retrieval
    metric's ("rOxford5k Medium mAP")."""
    if (retrieval := RETRIEVAL_METRIC.fullmatch(name)) and retrieval[4] == "map":
        return f"{RETRIEVAL_DATASETS.get(retrieval[1], retrieval[1])} {retrieval[3].capitalize()} mAP"
    if "shot_" in name and name.endswith("_top1"):
        shots, reader = name.removesuffix("_top1").split("shot_")
        return f"{shots}-shot {'kNN' if reader == 'knn' else reader}"
    return METRIC_HEADERS.get(name, name)


def chosen_note(entry: Entry) -> str:
    """A head grid's chosen heads, with how many trials chose each: "chosen: layer4 lr 1 (2 trials), layer4 lr 3"."""
    counts: dict[str, int] = {}
    for name in entry.chosen:
        counts[name] = counts.get(name, 0) + 1
    shown = ", ".join(f"{name} ({n} trials)" if n > 1 else name for name, n in counts.items())
    return f"chosen: {shown}" if shown else ""


def _per_class_table(setting: Setting, entries: list[Entry]) -> Table:
    with_classes = [e for e in entries if e.per_class]
    classes = list(dict.fromkeys(name for e in with_classes for name in e.per_class))
    rows = [Row((Cell(name), *(stat_cell(e.per_class.get(name)) for e in with_classes))) for name in classes]
    columns = (Column("Class"), *(Column(e.pretraining.label + (SMOKE_MARK if e.smoke else ""), True)
                                  for e in with_classes))
    return Table(f"per-class:{setting.key}", f"Per-class AP50, {setting_title(setting)}", columns, rows,
                 setting_subtitle(setting))


def _drop_empty_note(table: Table) -> Table:
    """Remove the last (Note) column when no row has a note."""
    if any(row.cells[-1].text for row in table.rows):
        return table
    table.columns = table.columns[:-1]
    table.rows = [Row(row.cells[:-1], row.kind) for row in table.rows]
    return table


# ------------------------------------------------------------------------------------------------------- ablations


def mechanism_label(entry: Entry) -> str:
    """"MoCo v1 (R18, 15 ep, embedded)", "MoCo v3 (R18, 30 ep, embedded)", "memory bank (R18, 15 ep)"."""
    p = entry.pretraining
    assert entry.sweep is not None
    details = ", ".join(x for x in (short_arch(p.arch), p.epochs_text, p.data) if x)
    name = p.method_label if p.method == entry.sweep.method else method_name(entry.sweep.method)
    return f"{name} ({details})"


def ablation_key(param: str, method: str, setting_key: str) -> str:
    """The ablation table's key (the CSV's section): "ablation-momentum:<setting>", for MoCo v3's curves
    "ablation-momentum-mocov3:<setting>"."""
    family = "-mocov3" if method == "mocov3" else ""
    return f"ablation-{param}{family}:{setting_key}"


def curve_labels(entries: list[Entry]) -> list[str]:
    """Each entry's mechanism label; where curves of one label differ in their recipe (the pretraining config less
    the swept field), its first six hex digits follow, so that their points are not read as one curve."""
    series: dict[str, set[str | None]] = {}
    for entry in entries:
        assert entry.sweep is not None
        series.setdefault(mechanism_label(entry), set()).add(entry.sweep.series)
    labels = []
    for entry in entries:
        assert entry.sweep is not None
        label, recipe = mechanism_label(entry), entry.sweep.series
        labels.append(f"{label} recipe {recipe[:6]}" if len(series[label]) > 1 and recipe else label)
    return labels


def ablation_tables(entries: list[Entry], published: list[PublishedRow]) -> tuple[list[Table], list[Shown]]:
    """One table per swept parameter, setting and family (MoCo v3's curves apart); rows per mechanism and value."""
    tables: list[Table] = []
    shown: list[Shown] = []
    for (param, v3, setting), group in groupby(entries, key=lambda e: (
            e.sweep.param, e.sweep.method == "mocov3", e.setting)):  # type: ignore[union-attr]
        rows_of = list(group)
        methods = {e.sweep.method for e in rows_of if e.sweep}
        pub = matching_momentum(setting, {e.pretraining.arch for e in rows_of}, published, methods) \
            if param == "momentum" else []
        table = _ablation_table(param, setting, rows_of, pub, v3=v3)
        tables.append(table)
        if pub:
            shown.append(Shown(table.key, setting, pub, param))
    return tables, shown


def _ablation_table(param: str, setting: Setting, entries: list[Entry], pub: list[PublishedRow], *,
                    v3: bool = False) -> Table:
    metrics = TASK_METRICS[setting.task]
    title = f"Ablation: {SWEEP_TITLES[param]}{' of MoCo v3' if v3 else ''}, {setting_title(setting)}"
    data = AblationData(param, title, metrics[0])
    rows: list[Row] = []
    for entry, label in zip(entries, curve_labels(entries), strict=True):
        assert entry.sweep is not None
        value = entry.sweep.value
        if entry.failed:
            values = tuple(Cell("failed") for _ in metrics)
            point = AblationPoint(value, None, None, failed=True, n=0)
        else:
            values = tuple(stat_cell(entry.metrics.get(m)) for m in metrics)
            main = entry.metrics.get(metrics[0])
            point = AblationPoint(value, main.mean if main else None, main.std if main else None,
                                  n=main.n if main else 0)
        data.series.setdefault(label, []).append(point)
        rows.append(Row((row_label(entry, label), Cell(fmt_sweep(value)), Cell(str(entry.n)), *values,
                         Cell(failure_note(entry))), "failed" if entry.failed else "ours"))
    for row in pub:
        assert row.momentum is not None
        rows.append(Row((Cell(row.label), Cell(fmt_sweep(row.momentum)), Cell(MISSING),
                         *(value_cell(row.values.get(m)) for m in metrics), Cell(source_note(row))),
                        "secondary" if row.secondary else "published"))
        data.series.setdefault(row.origin + ": " + row.backbone, []).append(
            AblationPoint(row.momentum, row.values.get(metrics[0]), None))
    notes = [V3_MOMENTUM_NOTE] if v3 and param == "momentum" else []
    if setting.smoke or any(e.smoke for e in entries):
        notes.append(SMOKE_NOTE)
    if any(e.failures for e in entries):
        notes.append("Failed runs are marked and never enter a mean.")
    if any(e.n > 1 for e in entries):
        notes.append("A point's trials are pretrainings of one recipe with other seeds: mean ± sample std over "
                      "n; the plot's error bars are that std.")
    if pub:
        notes.append("Published rows (published.csv) match this setting; they are not part of our means.")
    columns = (Column("Mechanism"), Column(SWEEP_HEADERS[param], True), Column("n", True),
               *(Column(METRIC_HEADERS.get(m, m), True) for m in metrics), Column("Note"))
    key = ablation_key(param, "mocov3" if v3 else "", setting.key)
    table = Table(key, title, columns, rows, setting_subtitle(setting), notes, data)
    return _drop_empty_note(table)


def all_tables(main: list[Entry], ablation: list[Entry], published: Iterable[PublishedRow],
               expected: dict[tuple[str, ...], dict[str, Expected]] | None = None,
               baseline: str | None = None) -> tuple[list[Table], list[Shown]]:
    pub = list(published)
    tables, shown = main_tables(main, pub, expected, baseline)
    more, more_shown = ablation_tables(ablation, pub)
    return tables + more, shown + more_shown
