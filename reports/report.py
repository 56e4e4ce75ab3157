"""Building a report from directories of result records, and writing it in the requested formats.

``build_report`` does the reading, grouping and table building (no files written, no plots drawn);
``reports.render.write_report`` renders Markdown, CSV, LaTeX and HTML (plots are drawn only for HTML). Records of
several studies (``reports.studies``) get a section each, with tables and curves of their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePath

from reports import FORMATS
from reports.comparisons import check_baseline, compare_entries, entry_baselines
from reports.expected import Expected
from reports.linear_transfer.table import Trial, load_trials, transfer_tables
from reports.linear_transfer.table import tidy as transfer_tidy
from reports.protocols import EPOCH_TASKS, LINEAR_EPOCHS, V3_PROTOCOL
from reports.published import PublishedRow, load_published
from reports.records import TASK_METRICS, Record, Skipped, load_records, read_records
from reports.studies import Study, find_studies
from reports.summary import Entry, Stat, delta, group, supervised_reference
from reports.tables import DELTA_TASKS, Shown, Table, ablation_key, all_tables, mechanism_label

FILE_NAMES = {"md": "report.md", "csv": "report.csv", "tex": "report.tex", "html": "report.html"}
CSV_COLUMNS = (
    "section", "origin", "status", "task", "protocol", "dataset", "dataset_path", "labels", "data_sha256", "engine",
    "model", "schedule", "eval_epochs", "eval_iterations", "pretraining", "method", "arch", "pretrain_data",
    "pretrain_epochs", "pretrain_epochs_planned", "pretrain_unfinished", "sha256", "sweep_param", "sweep_value",
    "metric", "class", "mean", "std", "n", "n_failed", "delta_vs_supervised", "baseline", "difference",
    "difference_se", "p_value", "test", "baseline_n", "note", "source", "files", "smoke",
    "study",
)


@dataclass(frozen=True)
class Curve:
    """A pretraining run's metrics.jsonl to plot, with the run's label."""

    label: str
    path: Path
    supervised: bool = False
    linear: tuple[tuple[int, float], ...] = ()  # (pretraining epochs, linear top-1) of its evaluated checkpoints
    linear_label: str = "linear"  # what those evaluations ran: "linear protocol (100 ep)", "linear, 5 ep"
    shown: str = ""  # the file as a caption names it: relative to where the report ran, never absolute


@dataclass
class Section:
    """One study's tables and curves (:mod:`reports.studies`)."""

    study: Study
    tables: list[Table]
    curves: list[Curve]


@dataclass
class Report:
    """Everything the renderers need. ``sections``: one per study, in order; ``tables`` and ``curves`` are all of
    theirs. ``studies``: every study the records make up, ``sections`` only those chosen (``only``)."""

    roots: list[str]
    records: list[Record]
    skipped: list[Skipped]
    tables: list[Table]
    tidy: list[dict[str, str]]
    curves: list[Curve] = field(default_factory=list)
    transfer: list[Trial] = field(default_factory=list)  # moco eval transfer's suites (reports.linear_transfer.table)
    sections: list[Section] = field(default_factory=list)
    studies: list[Study] = field(default_factory=list)


TRANSFER_STUDY = "linear transfer"  # moco eval transfer's suites, reported as a study of their own


class UnknownStudy(ValueError):
    """``only`` names no study of the records."""


@dataclass(frozen=True)
class Inputs:
    """What a report is built from, read once (:func:`read_inputs`): a report a study (``--split``) reuses it."""

    records: list[Record]
    skipped: list[Skipped]
    trials: list[Trial]
    studies: list[Study]


def read_inputs(roots: Sequence[str]) -> Inputs:
    """The records and transfer suites under ``roots``, those skipped, and the studies they form."""
    read = read_records(roots)
    records, skipped = load_records(roots, read)
    trials, transfer_skipped = load_trials(roots, read)
    studies = find_studies(records, roots)
    if trials:  # moco eval transfer's suites: a study of their own (their tables are reports.linear_transfer.table's)
        runs = len({t.run for t in trials})
        studies.append(Study(TRANSFER_STUDY, f"moco eval transfer's suites: {runs} suite run{'s' * (runs != 1)}", ()))
    return Inputs(records, skipped + transfer_skipped, trials, studies)


def build_report(roots: Sequence[str], published: list[PublishedRow] | None = None,
                 expected: dict[tuple[str, ...], dict[str, Expected]] | None = None, *, mix_marked: bool = False,
                 only: Sequence[str] = (), inputs: Inputs | None = None, baseline: str | None = None) -> Report:
    """``published`` and ``expected``: reports/published.csv and reports/expected.csv unless given.
    ``mix_marked``: the rows of smoke runs and unfinished pretrainings (marked) in the tables of finished real runs,
    not apart. ``only``: the names of the studies to report (:class:`UnknownStudy` for a name none has); all of them
    by default. ``inputs``: what :func:`read_inputs` read from ``roots``, where the caller has it already.
    ``baseline``: the row every row is compared with (reports.comparisons: random init unless given;
    :class:`reports.comparisons.UnknownBaseline` where it names no row)."""
    inputs = inputs or read_inputs(roots)
    records, skipped, trials, studies = inputs.records, inputs.skipped, inputs.trials, inputs.studies
    chosen = studies
    if only:
        names = {s.name for s in studies}
        unknown = [name for name in only if name not in names]
        if unknown:
            raise UnknownStudy(f"--only: no study {unknown[0]!r} here; the studies: "
                               f"{', '.join(repr(s.name) for s in studies)}")
        chosen = [s for s in studies if s.name in only]
        records = [r for s in chosen for r in s.records]
    trials = trials if any(s.name == TRANSFER_STUDY for s in chosen) else []
    pub = load_published() if published is None else published
    if baseline is not None:  # a row of any study (a page of --split may lack it: its tables then compare nothing)
        rows = group(inputs.records, mix_marked=mix_marked)[0]
        check_baseline(baseline, [(e.pretraining, e.pretraining.label) for e in rows]
                       + [(t.pretraining, t.pretraining.label) for t in inputs.trials])
    sections, tidy = [], []
    for study in chosen:
        if study.name == TRANSFER_STUDY:
            sections.append(Section(study, transfer_tables(trials, pub, mix_marked=mix_marked, baseline=baseline),
                                    []))
            tidy += [{c: row.get(c, "") for c in CSV_COLUMNS}
                     for row in transfer_tidy(trials, mix_marked=mix_marked, baseline=baseline)]
            continue
        main, ablation = group(study.records, mix_marked=mix_marked)
        tables, shown = all_tables(main, ablation, pub, expected, baseline)
        rows = tidy_rows(main, ablation, shown, [], baseline)
        if len(chosen) > 1:
            rows = [{**row, "study": study.name} for row in rows]
        tidy += rows
        sections.append(Section(study, tables, find_curves(main + ablation)))
    tidy += tidy_rows([], [], [], skipped)
    return Report(list(roots), records, skipped, [t for s in sections for t in s.tables], tidy,
                  [c for s in sections for c in s.curves], trials, sections, studies)


# ------------------------------------------------------------------------------------------------------------- CSV


def num(value: float | None) -> str:
    return "" if value is None else repr(round(value, 6))


def tidy_rows(main: list[Entry], ablation: list[Entry], shown: list[Shown], skipped: list[Skipped],
              baseline: str | None = None) -> list[dict[str, str]]:
    """The long (tidy) form: one row per (table row, metric[, class]); published rows and skipped files too. A
    row of a main table carries its comparison with its table's ``baseline`` row on that metric (columns baseline
    to baseline_n; reports.comparisons)."""
    rows: list[dict[str, str]] = []
    for setting_key in dict.fromkeys(e.setting.key for e in main):
        entries = [e for e in main if e.setting.key == setting_key]
        reference = supervised_reference(entries)[0] if entries[0].setting.task in DELTA_TASKS else None
        section = f"semi:{replace(entries[0].setting, labels=None).key}" if entries[0].setting.labels else setting_key
        bases = [None] * len(entries) if entries[0].setting.labels else entry_baselines(entries, baseline)
        for entry, base in zip(entries, bases, strict=True):
            rows.extend(_entry_rows(section, entry, reference, base))
    for entry in ablation:
        assert entry.sweep is not None
        rows.extend(_entry_rows(ablation_key(entry.sweep.param, entry.sweep.method, entry.setting.key), entry, None,
                                None))
    for item in shown:
        rows.extend(_published_rows(item))
    rows.extend({"section": "skipped", "origin": "skipped", "status": "skipped", "note": s.reason, "files": s.path}
                for s in skipped)
    return [{c: row.get(c, "") for c in CSV_COLUMNS} for row in rows]


def _text(value: int | None) -> str:
    return "" if value is None else str(value)


def _entry_rows(section: str, entry: Entry, reference: Entry | None,
                baseline: Entry | None) -> list[dict[str, str]]:
    s, p = entry.setting, entry.pretraining
    base = {
        "section": section, "origin": "ours", "status": "failed" if entry.failed else "ok", "task": s.task,
        "protocol": s.protocol, "dataset": s.dataset, "dataset_path": s.dataset_path, "labels": s.labels or "",
        "data_sha256": s.data_digest or "", "engine": s.engine or "", "model": s.model or "",
        "schedule": s.schedule or "",
        "eval_epochs": _text(s.length) if s.task in EPOCH_TASKS else "",
        "eval_iterations": _text(s.length) if s.task in DELTA_TASKS else "",
        "pretraining": mechanism_label(entry) if entry.sweep else p.label, "method": p.method or "",
        "arch": p.arch, "pretrain_data": p.data or "", "pretrain_epochs": _text(p.epochs),
        "pretrain_epochs_planned": _text(p.planned_epochs),
        "pretrain_unfinished": p.unfinished_field,
        "sha256": p.sha256 or "", "n": str(entry.n), "n_failed": str(len(entry.failures)),
        "note": "; ".join(dict.fromkeys(entry.failures)), "files": "; ".join(entry.files),
        "smoke": "yes" if entry.smoke else "no",
    }
    if entry.sweep:
        base.update(sha256="", method=entry.sweep.method, sweep_param=entry.sweep.param,
                    sweep_value=num(entry.sweep.value))
    metrics = TASK_METRICS[s.task] if entry.failed else list(entry.metrics)
    rows = [{**base, "metric": m, **_stat_fields(entry.metrics.get(m)), **_spread_fields(entry, m),
             "delta_vs_supervised": num(delta(entry, reference, m)), **_compared(entry, baseline, m)}
            for m in metrics]
    rows += [{**base, "metric": "AP50", "class": name, **_stat_fields(stat)} for name, stat in entry.per_class.items()]
    return rows


def _compared(entry: Entry, base: Entry | None, metric: str) -> dict[str, str]:
    comparison = compare_entries(entry, base, metric)
    return comparison.csv_fields() if comparison else {}


def _spread_fields(entry: Entry, metric: str) -> dict[str, str]:
    """A one-trial few-shot row's std over its tries, and how many (the note)."""
    if metric not in entry.spread:
        return {}
    std, tries = entry.spread[metric]
    return {"std": num(std), "note": f"std over {tries} tries of the shots drawn"}


def _stat_fields(stat: Stat | None) -> dict[str, str]:
    if stat is None or stat.n == 0:
        return {}
    return {"mean": num(stat.mean), "std": num(stat.std), "n": str(stat.n)}


def _published_rows(item: Shown) -> list[dict[str, str]]:
    s = item.setting
    section = item.key  # the table's: the setting's, or its ablation's
    rows = []
    for row in item.rows:
        base = {"section": section, "origin": row.origin, "status": "published", "task": s.task,
                "protocol": s.protocol, "dataset": s.dataset, "dataset_path": s.dataset_path,
                "engine": s.engine or "", "model": s.model or "", "schedule": row.schedule, "pretraining": row.pretrain,
                "arch": row.backbone, "pretrain_data": row.pretrain_data, "source": row.source}
        if item.sweep_param:
            base.update(sweep_param=item.sweep_param, sweep_value=num(row.momentum))
        rows += [{**base, "metric": m, "mean": num(v), "delta_vs_supervised": num(row.deltas.get(m))}
                 for m, v in row.values.items()]
    return rows


# ---------------------------------------------------------------------------------------------------------- curves


def find_curves(entries: Iterable[Entry]) -> list[Curve]:
    """Each pretraining run whose metrics.jsonl lies beside its checkpoint, labelled by its latest checkpoint, with
    the linear top-1 of each of its checkpoints that was evaluated (``moco eval snapshots``, the final one), of one
    protocol and length: a protocol's own length where there is one (the MoCo v3 protocol's first for a v3
    pretraining, else the paper's), else the longest."""
    found: dict[Path, tuple[tuple[int, int], Curve, str | None]] = {}
    linear: dict[Path, dict[tuple[str, int | None], dict[int, float]]] = {}  # run -> (protocol, length) -> ep -> top-1
    for entry in entries:
        p = entry.pretraining
        if p.kind == "random" or not p.source:
            continue
        path = metrics_path(p.source, entry.files[0])
        if path is None:
            continue
        key = path.resolve()
        label = p.label if not entry.sweep else f"{p.label}, {entry.sweep.param} = {entry.sweep.value:g}"
        progress = (p.epochs or 0, p.partial_steps)
        if key not in found or progress > found[key][0]:
            found[key] = (progress, Curve(label, key, p.is_supervised, shown=shown_path(path)), p.method)
        top1 = entry.metrics.get("top1")
        s = entry.setting
        if s.protocol in LINEAR_EPOCHS and p.epochs is not None and top1 is not None and top1.n:
            linear.setdefault(key, {}).setdefault((s.protocol, s.length), {})[p.epochs] = top1.mean
    curves = []
    for key, (_, c, method) in found.items():
        by_run = linear.get(key, {})
        first = V3_PROTOCOL if method == "mocov3" else "linear"
        chosen = max(by_run, default=None, key=lambda pl: (pl[1] == LINEAR_EPOCHS[pl[0]], pl[0] == first, pl[1] or 0))
        points = tuple(sorted(by_run.get(chosen, {}).items())) if chosen else ()
        curves.append(Curve(c.label, c.path, c.supervised, points, _linear_label(*(chosen or ("linear", None))),
                            c.shown))
    return sorted(curves, key=lambda curve: curve.label)


def _linear_label(protocol: str, length: int | None) -> str:
    """"linear protocol (100 ep)", "linear, 5 ep (the paper's: 100)", "MoCo v3 linear protocol (90 ep)"."""
    epochs = LINEAR_EPOCHS[protocol]
    name, whose = ("MoCo v3 linear", "the protocol's") if protocol == V3_PROTOCOL else ("linear", "the paper's")
    if length == epochs:
        return f"{name} protocol ({length} ep)"
    return name if length is None else f"{name}, {length} ep ({whose}: {epochs})"


def shown_path(path: Path) -> str:
    """``path`` as a caption shows it: relative to the working directory where it lies below it, else its last
    three parts (an absolute path names the machine's folders, not the run)."""
    if not path.is_absolute():
        return str(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(PurePath("...", *path.parts[-3:]))


def metrics_path(source: str, record_path: str) -> Path | None:
    """``Path(source).parent / "metrics.jsonl"``; a relative source is tried from the working directory, then from
    the record's directory."""
    src = Path(source)
    candidates = [src.parent / "metrics.jsonl"]
    if not src.is_absolute():
        candidates.append(Path(record_path).parent / src.parent / "metrics.jsonl")
    return next((c for c in candidates if c.is_file()), None)


# ---------------------------------------------------------------------------------------------------------- output


def parse_formats(text: str) -> list[str]:
    """"md,csv" -> ["md", "csv"]; raises ValueError naming an unknown format."""
    formats = [f.strip().lower() for f in text.split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"--formats: unknown format {', '.join(unknown) or '(none given)'}; "
                         f"expected a comma-separated subset of {','.join(FORMATS)}")
    return list(dict.fromkeys(formats))
