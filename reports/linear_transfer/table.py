"""The linear transfer suite's table, from ``moco eval transfer`` records (task ``transfer``): one column a dataset
in SimCLR's Table 8 order (arXiv 2002.05709; CUB-200-2011 in Birdsnap's place, as DINOv2's Table 8), the mean
over them, one row a pretraining (its trials: mean ± sample std), published rows beside ours (published.csv,
task ``transfer_linear``), and significance notes between rows.

Rows and trials: records are grouped by the suite run they belong to (a trial: one backbone through the suite),
and trials by pretraining (:func:`reports.summary.pretraining_identity`: the same weights, or our runs of one
recipe with other seeds; random init of one arch). A trial's mean is over the table's datasets it has all of.
Tables are by setting: the real suite or the embedded one (and its version), the view size and the solver.
Trials of a smoke run (``MOCO_SMOKE=1``, or weights a smoke run made: the record's ``smoke``) and of a pretraining
stopped before its planned epochs are tables of their own after their setting's (as :mod:`reports.summary` keeps
them apart), their rows marked, unless the report is asked to mix them.

Significance, between each row and the random-init row (the floor) and the supervised one (the reference):
- rows with 2 or more trials: the difference of the trial means of the suite mean, in standard errors of that
  difference (Welch: sqrt(s1^2/n1 + s2^2/n2)); the trials of a row differ in their seeds, so this is the SE that
  covers pretraining noise, which a test over one trial's test images does not;
- rows of one trial each: per dataset, a paired permutation test over the test images (SimCLR's choice): each
  image's outcome under the two rows swapped at random. For top-1 its exact distribution is the binomial one of
  McNemar's exact test (only the images one row gets right and the other wrong move), computed exactly; for mean
  per-class accuracy, where images weigh 1/(classes x their class's size), 10,000 random swaps (numpy's generator,
  seed 0). The 11-point mAP has no per-image form: no test. Both run in numpy over the outcomes (a test set of 10^6
  images takes well under a second; benchmarks/report_scale.py), which are checked when the record is read: 0s and
  1s and whole-number labels, as many of each, or the record is skipped with the reason.
Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from moco_core.solver_protocols import CONVERGED
from reports.comparisons import COMPARISON_NOTE, Comparison, Sample, baselines, column_header, welch
from reports.linear_transfer.datasets import HEADERS, OWN_SUITE, REAL, REAL_SUITE, is_released, own_column
from reports.linear_transfer.fewshot import FEWSHOT_TASK, Shots, fewshot_table, parse_shots, shots_sample
from reports.linear_transfer.published import Placement, mean_notes, place, published_mean
from reports.pretraining import Pretraining
from reports.protocols import MARK_TITLES, SMOKE_NOTE, UNFINISHED_NOTE
from reports.published import PublishedRow
from reports.records import RecordError, Skipped, pretraining_of, read_records
from reports.summary import pretraining_identity
from reports.tables import MISSING, SMOKE_MARK, Cell, Column, Row, Table, comparison_cell, fmt

TASK = "transfer"
# The suite's default solver protocol (classification/linear_transfer/config.py, config.solver.protocol; few-shot
# is always the converged one); which published rows stand beside which protocol: reports/linear_transfer/published.py
EMBEDDED = ("shapes", "textures", "variants", "scenes", "digits")
METRIC_NAMES = {"top1": "top-1", "mean_per_class": "mean per-class acc.", "map11": "11-point mAP"}
PERMUTATIONS = 10_000


@dataclass
class Result:
    """One dataset of one trial."""

    dataset: str
    metric: str
    value: float
    correct: np.ndarray | list[int] | None = None  # (N,) each test image right (1) or wrong (0)
    labels: np.ndarray | list[int] | None = None  # (N,) each test image's class
    split_sha: str | None = None
    header: str = ""  # the column's header ("CIFAR10", "digits (CIFAR-10 layout)"); "": the dataset's name

    @property
    def title(self) -> str:
        return self.header or HEADERS.get(self.dataset, self.dataset)


@dataclass
class Trial:
    run: str  # the suite run's directory (the records' grandparent)
    pretraining: Pretraining
    setting: tuple[str, ...]
    results: dict[str, Result] = field(default_factory=dict)
    fewshot: dict[str, list[Shots]] = field(default_factory=dict)  # by dataset column (reports.linear_transfer.fewshot)
    titles: dict[str, str] = field(default_factory=dict)  # the few-shot datasets' headers
    smoke: bool = False  # a smoke run's, or of weights a smoke run made: numbers that mean nothing

    def mark(self) -> str | None:
        """What keeps this trial out of the tables of finished real runs: "smoke", "unfinished" or None."""
        if self.smoke:
            return "smoke"
        return "unfinished" if self.pretraining.unfinished else None


def _setting(data: dict[str, Any]) -> tuple[str, ...]:
    config = _object(data, "config")
    cfg_data, solver = _object(config, "data", "config."), _object(config, "solver", "config.")
    dataset = data["dataset"]
    suite = str(dataset.get("version")) if dataset.get("path") == "embedded" else REAL_SUITE
    crop = _field(cfg_data, "crop_size", int, "?", "config.data.")
    interpolation = _field(cfg_data, "interpolation", str, "bicubic", "config.data.")
    view = f"{crop}-px {interpolation} crops"
    low = _field(solver, "lambda_min", float, 1e-6, "config.solver.")
    high = _field(solver, "lambda_max", float, 1e5, "config.solver.")
    sweep = f"{_field(solver, 'lambdas', int, 45, 'config.solver.')} L2 values {low:g} to {high:g}"
    # the solver's protocol (config.solver.protocol; records before it are of the converged one): two rows of one
    # checkpoint measured by two protocols are two measurements, never one row's trials
    protocol = CONVERGED if data.get("task") == FEWSHOT_TASK else _field(solver, "protocol", str, CONVERGED,
                                                                          "config.solver.")
    return suite, view, sweep, f"{protocol} protocol"


def _object(obj: dict[str, Any], key: str, prefix: str = "") -> dict[str, Any]:
    """``obj[key]`` where it is an object, {} where it is absent; RecordError where it is something else."""
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RecordError(f"field '{prefix}{key}' is not an object (a {type(value).__name__})")
    return value


def _field(obj: dict[str, Any], key: str, kind: type, default: Any, prefix: str) -> Any:
    """``obj[key]`` where it is a ``kind`` (a float: any finite number; never a bool), ``default`` where it is
    absent; RecordError where it is something else."""
    value = obj.get(key)
    if value is None:
        return default
    wanted = (int, float) if kind is float else (kind,)
    if isinstance(value, bool) or not isinstance(value, wanted) or (kind is float and not math.isfinite(value)):
        raise RecordError(f"field '{prefix}{key}' is not a {'number' if kind is float else kind.__name__} "
                          f"({str(value)[:40]!r})")
    return value


def _outcomes(transfer: dict[str, Any]) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
    """(correct, labels), each (N,), of the record's ``transfer.test_correct`` and ``transfer.test_labels``;
    (None, None) where it has neither (the 11-point mAP); RecordError where they are not N 0s and 1s and N whole
    numbers."""
    raw_correct, raw_labels = transfer.get("test_correct"), transfer.get("test_labels")
    if raw_correct is None and raw_labels is None:
        return None, None
    correct = _whole_numbers(raw_correct, "transfer.test_correct")
    labels = _whole_numbers(raw_labels, "transfer.test_labels")
    if not np.isin(correct, (0, 1)).all():
        raise RecordError("field 'transfer.test_correct' holds numbers other than 0 and 1")
    if len(correct) != len(labels):
        raise RecordError(f"fields 'transfer.test_correct' and 'transfer.test_labels' differ in length "
                          f"({len(correct)} and {len(labels)} test images)")
    return correct.astype(np.int8), labels


def _whole_numbers(value: Any, name: str) -> np.ndarray:
    """``value`` as an int64 array (N,), where it is a list of whole numbers (not bools); RecordError otherwise."""
    problem = f"field {name!r} is not a list of whole numbers"
    if not isinstance(value, list):
        raise RecordError(f"{problem} (a {type(value).__name__})")
    try:
        array = np.array(value) if value else np.zeros(0, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):  # ragged nested lists
        raise RecordError(problem) from None
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise RecordError(f"{problem} (it holds {array.dtype.name if array.ndim == 1 else 'lists'})")
    return array.astype(np.int64)


@dataclass(frozen=True)
class _Read:
    """What one suite record (the linear result or the few-shot one) says of its run and dataset."""

    run: str
    pretraining: Pretraining
    setting: tuple[str, ...]
    key: str  # the dataset's column: its name, or its folder's where it is one's own data (transfer_datasets)
    header: str
    smoke: bool


def _read(data: dict[str, Any], shown: str) -> _Read:
    dataset, backbone = data.get("dataset"), data.get("backbone")
    if not (isinstance(dataset, dict) and isinstance(backbone, dict)):
        raise RecordError(f"a {data.get('task')} record needs 'dataset' and 'backbone' objects")
    name = dataset.get("name")
    if not isinstance(name, str) or not name:
        raise RecordError("field 'dataset.name' is missing or not valid")
    setting, key, header = _setting(data), name, ""
    if setting[0] == REAL_SUITE and not is_released(name, dataset):  # one's own folder in a famous layout
        setting, (key, header) = (OWN_SUITE, *setting[1:]), own_column(name, dataset)
    pretrain = backbone.get("pretrain") if isinstance(backbone.get("pretrain"), dict) else {}
    smoke = data.get("smoke") is True or pretrain.get("smoke") is True
    return _Read(str(Path(shown).parent.parent), pretraining_of(backbone), setting, key, header, smoke)


def parse(data: Any, shown: str) -> tuple[str, Pretraining, tuple[str, ...], Result, bool]:
    """(run, pretraining, setting, result, smoke) of one transfer record; RecordError when it is not one. Smoke: the
    record says so (written by a smoke run, or of weights a smoke run made), or its backbone does."""
    if not isinstance(data, dict) or data.get("task") != TASK:
        raise RecordError("not a transfer record")
    transfer = data.get("transfer")
    if not isinstance(transfer, dict):
        raise RecordError("a transfer record needs a 'transfer' object")
    read = _read(data, shown)
    metric, value = transfer.get("metric"), transfer.get("test")
    if not isinstance(metric, str) or metric not in METRIC_NAMES or \
            isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RecordError("field 'transfer.metric' or 'transfer.test' is missing or not valid")
    correct, labels = _outcomes(transfer)
    splits = data["dataset"].get("splits") if isinstance(data["dataset"].get("splits"), dict) else {}
    result = Result(read.key, metric, float(value), correct, labels,
                    splits.get("sha256") if isinstance(splits.get("sha256"), str) else None, read.header)
    return read.run, read.pretraining, read.setting, result, read.smoke


def load_trials(roots: Iterable[str], read: list[tuple[str, Any]] | None = None) -> tuple[list[Trial], list[Skipped]]:
    """The suite trials under ``roots`` (or of ``read``, :func:`reports.records.read_records` of them), with their
    few-shot results, and the transfer records skipped with why (files that are not records are listed by
    :func:`reports.records.load_records`)."""
    trials: dict[str, Trial] = {}
    skipped = []
    for shown, data in read_records(roots) if read is None else read:
        if not isinstance(data, dict) or data.get("task") not in (TASK, FEWSHOT_TASK):
            continue
        try:
            if data["task"] == TASK:
                run, pretraining, setting, result, smoke = parse(data, shown)
            else:
                got, shots = _read(data, shown), parse_shots(data)
                run, pretraining, setting, smoke = got.run, got.pretraining, got.setting, got.smoke
        except RecordError as err:
            skipped.append(Skipped(shown, str(err)))
            continue
        trial = trials.setdefault(f"{run}\0{setting}\0{smoke}", Trial(run, pretraining, setting, smoke=smoke))
        if data["task"] == TASK:
            trial.results[result.dataset] = result
        else:
            trial.fewshot[got.key] = shots
            trial.titles[got.key] = got.header or HEADERS.get(got.key, got.key)
    return list(trials.values()), skipped


def _mean(values: list[float]) -> tuple[float, float | None]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def _cell(values: list[float]) -> Cell:
    if not values:
        return Cell(MISSING)
    mean, std = _mean(values)
    return Cell(fmt(mean), fmt(std) if std is not None else None)


def _table_mark(trial: Trial, mix_marked: bool) -> str:
    return "" if mix_marked else trial.mark() or ""


def transfer_tables(trials: list[Trial], published: list[PublishedRow], *, mix_marked: bool = False,
                    baseline: str | None = None) -> list[Table]:
    """One table a setting, and one of its smoke trials and one of its unfinished pretrainings' after it (one
    table, their rows marked, with ``mix_marked``). The mean is over the datasets every trial of the table has
    (its header says how many; a note names those left out), so no row's mean is over other datasets. Each row's
    mean is compared with its ``baseline`` row's (reports.comparisons; random init by default)."""
    tables = []
    for setting, mark in sorted({(t.setting, _table_mark(t, mix_marked)) for t in trials}):
        everyone = [t for t in trials if t.setting == setting and _table_mark(t, mix_marked) == mark]
        solver = "" if setting[3] == f"{CONVERGED} protocol" else f", {setting[3]}"  # the default's heading unchanged
        title = f"Linear transfer ({setting[0]}, {setting[1]}{solver})" + (f", {MARK_TITLES[mark]}" if mark else "")
        mine = [t for t in everyone if t.results]
        if not mine:
            tables += _fewshot_tables(everyone, setting, mark, title, baseline)
            continue
        names, common = _datasets(mine, setting)
        titles = {n: next(t.results[n].title for t in mine if n in t.results) for n in names}
        groups = row_groups(mine)
        bases = group_baselines(groups, baseline) if common else [None] * len(groups)
        versus = any(b is not None for b in bases)
        columns = (Column("pretraining"), Column("n", True), *(Column(titles[n], True) for n in names),
                   Column(f"mean of {len(common)}", True),
                   *((Column(column_header(baseline, f"mean of {len(common)}"), True),) if versus else ()))
        rows = []
        for group, base in zip(groups, bases, strict=True):
            cells = [_cell([t.results[n].value for t in group if n in t.results]) for n in names]
            compared = (comparison_cell(_compare_mean(group, base, common) if base else None,
                                        is_baseline=any(group is b for b in bases)),) if versus else ()
            rows.append(Row((Cell(_label(group[0])), Cell(str(len(group))), *cells, _cell(_means(group, common)),
                             *compared)))
        # published rows beside rows measured as they were only (protocol, backbone family): transfer_published.py
        comparable = setting[0] == REAL_SUITE and setting[1].startswith("224-px") and not mark
        placed = place(published, setting[3].removesuffix(" protocol"), {t.pretraining.arch for t in mine}, names) \
            if comparable else Placement()
        rows += [_published_row(p, names, common, versus) for p in placed.beside]
        metrics = "; ".join(f"{titles[n]}: {METRIC_NAMES[_metric(mine, n)]}" for n in names)
        notes = [f"Metrics: {metrics}. Frozen features, L2 logistic regression by L-BFGS, its strength chosen on "
                 f"val among the sweep's values, refit on train + val, tested once (moco eval transfer)."]
        notes += _mean_note(names, common, titles)
        notes += significance(groups, names, common) + ([COMPARISON_NOTE] if versus else [])
        notes += placed.notes()
        notes += mean_notes(placed.beside, common, titles, [(_label(g[0]), [{n: r.value for n, r in t.results.items()}
                                                                            for t in g]) for g in groups])
        if setting[0] == OWN_SUITE:
            notes.append("Datasets read in a famous dataset's file layout but not of its released size (classes, "
                         "train + val and test images) are named by their folder: no published row is beside them.")
        if mark == "unfinished":
            notes.append(UNFINISHED_NOTE)
        if any(t.smoke for t in mine):
            notes.append(SMOKE_NOTE)
        # the view in the heading: the 224-px and 32-px tables of one suite had the same one
        tables.append(Table(_section(setting, mark), title, columns, rows, subtitle=", ".join(setting[2:]),
                            notes=notes))
        tables += _fewshot_tables(everyone, setting, mark, title, baseline)
    return tables


def _datasets(mine: list[Trial], setting: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(the table's datasets in the suite's order, those every trial has)."""
    order = REAL if setting[0] == REAL_SUITE else EMBEDDED
    names = [n for n in order if any(n in t.results for t in mine)]
    names += sorted({n for t in mine for n in t.results} - set(names))
    return names, [n for n in names if all(n in t.results for t in mine)]


def row_groups(trials: list[Trial]) -> list[list[Trial]]:
    """The trials of each row (one pretraining, smoke apart), in table order."""
    rows_of: dict[tuple[Any, ...], list[Trial]] = {}
    for trial in trials:
        rows_of.setdefault((pretraining_identity(trial.pretraining), trial.smoke), []).append(trial)
    return sorted(rows_of.values(), key=lambda g: (g[0].pretraining.sort_key(), g[0].smoke))


def group_baselines(groups: list[list[Trial]], wanted: str | None) -> list[list[Trial] | None]:
    """Each row's baseline row (reports.comparisons.baselines)."""
    index = baselines([(g[0].pretraining, g[0].pretraining.label) for g in groups], wanted)
    return [groups[i] if i is not None else None for i in index]


def _means(group: list[Trial], common: list[str]) -> list[float]:
    """Each trial's mean over ``common``."""
    return [statistics.fmean(t.results[n].value for n in common) for t in group] if common else []


def sample(values: list[float]) -> Sample:
    return Sample(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None, len(values))


def _compare_mean(group: list[Trial], base: list[Trial], common: list[str]) -> Comparison:
    return welch(sample(_means(group, common)), sample(_means(base, common)), _label(base[0]))


def compare_dataset(group: list[Trial], base: list[Trial], name: str) -> Comparison | None:
    """A row against its baseline on one dataset: the paired test over the test images where both are one trial
    with per-image outcomes, else Welch's over trials."""
    ours, theirs = [t.results[name] for t in group if name in t.results], [t.results[name] for t in base
                                                                           if name in t.results]
    if not ours or not theirs:
        return None
    comparison = welch(sample([r.value for r in ours]), sample([r.value for r in theirs]), _label(base[0]))
    p = paired_p(ours[0], theirs[0]) if len(ours) == len(theirs) == 1 else None
    if p is None:
        return comparison
    test = "exact McNemar over the test images" if ours[0].metric == "top1" else \
        "paired sign-flip permutation over the test images"
    return dataclasses.replace(comparison, p=p, test=test)


def _fewshot_tables(trials: list[Trial], setting: tuple[str, ...], mark: str, title: str,
                    baseline: str | None) -> list[Table]:
    """The few-shot table of a setting's trials (reports.linear_transfer.fewshot), where any has few-shot results."""
    groups = row_groups([t for t in trials if t.fewshot])
    if not groups:
        return []
    shot = [t for g in groups for t in g]
    titles = {n: t.titles[n] for n in (*REAL, *EMBEDDED) for t in shot if n in t.titles}
    titles.update({n: h for t in shot for n, h in sorted(t.titles.items()) if n not in titles})
    index = baselines([(g[0].pretraining, g[0].pretraining.label) for g in groups], baseline)
    table = fewshot_table(_section(setting, mark) + "|fewshot", f"{title}, few-shot", [_label(g[0]) for g in groups],
                          [[t.fewshot for t in g] for g in groups], titles, index, baseline)
    table.subtitle = ", ".join(setting[2:])
    return [table]


def _published_row(row: PublishedRow, names: list[str], common: list[str], versus: bool) -> Row:
    """A published row: its values where it has them; its mean over those of ``common`` it has (transfer_published);
    no comparison of its own (a published row has no trials)."""
    values = [row.values.get(n) for n in names]
    return Row((Cell(row.label), Cell(MISSING), *(Cell(fmt(v)) if v is not None else Cell(MISSING) for v in values),
                published_mean(row, common), *((Cell(MISSING),) if versus else ())), row.origin)


def _mean_note(names: list[str], common: list[str], titles: dict[str, str]) -> list[str]:
    if len(common) == len(names):
        return []
    left = ", ".join(titles[n] for n in names if n not in common)
    if not common:
        return [f"No mean: no dataset is in every row ({left} are not)."]
    return [f"Mean of {len(common)}: over {', '.join(titles[n] for n in common)}, the datasets every row has; "
            f"{left} left out (not in every row)."]


def _section(setting: tuple[str, ...], mark: str) -> str:
    return f"transfer:{'|'.join(setting)}" + (f"|{mark}" if mark else "")


def _label(trial: Trial) -> str:
    """A row's pretraining, marked where its trials are smoke runs (an unfinished one says so in its label)."""
    return trial.pretraining.label + (SMOKE_MARK if trial.smoke else "")


def _metric(trials: list[Trial], name: str) -> str:
    return next(t.results[name].metric for t in trials if name in t.results)


def significance(groups: list[list[Trial]], names: list[str], common: list[str]) -> list[str]:
    """Notes comparing each row with the random-init and supervised rows (see the module docstring): the Welch
    test of the mean over ``common`` (the datasets every row has), the paired tests on each of ``names``."""
    refs = [g for g in groups if g[0].pretraining.kind == "random"][:1]
    refs += [g for g in groups if g[0].pretraining.is_supervised][:1]
    notes = []
    for ref in refs:
        for other in groups:
            if other is ref or (other in refs and refs.index(other) < refs.index(ref)):
                continue
            line = _compare(other, ref, names, common)
            if line:
                notes.append(f"{_label(other[0])} vs {_label(ref[0])}: {line}")
    return notes


def _compare(a: list[Trial], b: list[Trial], names: list[str], common: list[str]) -> str | None:
    means = [[statistics.fmean(t.results[n].value for n in common) for t in g] if common else [] for g in (a, b)]
    if len(means[0]) >= 2 and len(means[1]) >= 2:
        diff = statistics.fmean(means[0]) - statistics.fmean(means[1])
        se = math.sqrt(statistics.variance(means[0]) / len(means[0]) + statistics.variance(means[1]) / len(means[1]))
        where = f"{diff / se:.1f} SE" if se > 0 else "SE 0"
        return (f"mean of {len(common)} {diff:+.1f} points over {len(means[0])} and {len(means[1])} trials, {where} "
                f"of the difference (Welch)")
    if len(a) == 1 and len(b) == 1:
        tests = [f"{a[0].results[n].title} p={p:.2g} ({a[0].results[n].value - b[0].results[n].value:+.1f} points)"
                 for n in names if (p := paired_p(a[0].results.get(n), b[0].results.get(n))) is not None]
        return "paired permutation test over the test images: " + ", ".join(tests) if tests else None
    return None


def paired_p(a: Result | None, b: Result | None) -> float | None:
    """Two-sided p of the paired permutation test of two rows' outcomes on the same test images; None where it
    does not apply (no per-image outcomes, other test images, the mAP)."""
    if a is None or b is None or a.correct is None or b.correct is None or a.labels is None or b.labels is None \
            or a.split_sha != b.split_sha or a.metric == "map11" or not np.array_equal(a.labels, b.labels):
        return None
    diff = np.asarray(a.correct, dtype=np.int64) - np.asarray(b.correct, dtype=np.int64)  # (N,) in {-1, 0, 1}
    if a.metric == "top1":
        return mcnemar_exact(int((diff > 0).sum()), int((diff < 0).sum()))
    _, index, sizes = np.unique(np.asarray(a.labels), return_inverse=True, return_counts=True)
    weights = diff / (len(sizes) * sizes[index])  # (N,) each image's share of the mean per-class accuracy
    return sign_flip_p(weights[diff != 0])


def mcnemar_exact(plus: int, minus: int) -> float:
    """Two-sided exact McNemar p: P(|X - n/2| >= |plus - n/2|), X ~ Binomial(n = plus + minus, 1/2). The binomial
    is symmetric, so this is twice its lower tail up to min(plus, minus): the term at the tail's top from log-gamma,
    the ones below it by the ratio P(X = k - 1) / P(X = k) = k / (n - k + 1), summed in numpy (O(min) operations,
    none in Python; the terms that matter are the first ones, whose ratios are summed exactly enough)."""
    n, low = plus + minus, min(plus, minus)
    if 2 * low >= n:  # plus == minus (n = 0 included): every outcome is as extreme
        return 1.0
    top = math.lgamma(n + 1) - math.lgamma(low + 1) - math.lgamma(n - low + 1) + n * math.log(0.5)
    k = np.arange(low, 0, -1, dtype=np.float64)  # low, low - 1, ..., 1
    below = np.concatenate(([0.0], np.cumsum(np.log(k) - np.log(n - k + 1))))  # log P(X = low - j) / P(X = low)
    return min(1.0, 2.0 * math.exp(top) * float(np.exp(below).sum()))


def sign_flip_p(differences: np.ndarray | list[float], permutations: int = PERMUTATIONS, seed: int = 0) -> float:
    """Two-sided Monte Carlo p of the sum of paired ``differences`` under random sign flips ((hits + 1) / (N + 1)).

    Flipping the signs of the m_v differences of magnitude v at random adds v (2 B_v - m_v), B_v ~ Binomial(m_v,
    1/2), so each permutation draws one binomial a distinct magnitude (as many as the classes, for the mean
    per-class accuracy) instead of a sign an image: the same distribution, in numpy, in blocks of at most 2^22
    draws (numpy's generator, ``seed``)."""
    magnitudes, counts = np.unique(np.abs(np.asarray(differences, dtype=np.float64)), return_counts=True)
    observed = abs(float(np.sum(differences)))
    rng = np.random.default_rng(seed)
    block = max(1, (1 << 22) // max(1, len(magnitudes)))
    hits, done = 0, 0
    while done < permutations:
        size = min(block, permutations - done)
        heads = rng.binomial(counts, 0.5, size=(size, len(magnitudes)))  # (size, magnitudes)
        sums = (2 * heads - counts) @ magnitudes  # (size,) the flipped sums
        hits += int((np.abs(sums) >= observed - 1e-12).sum())
        done += size
    return (hits + 1) / (permutations + 1)


def tidy(trials: list[Trial], *, mix_marked: bool = False, baseline: str | None = None) -> list[dict[str, str]]:
    """The CSV's rows: one a trial and dataset (and k, for few-shot: its std over the tries, their number in the
    note), with its marks (columns smoke, pretrain_unfinished); then one a table row (status "row": the mean over
    its trials) and dataset, mean over datasets, and k, with its comparison with its baseline row."""
    rows = _trial_rows(trials, mix_marked)
    for setting, mark in sorted({(t.setting, _table_mark(t, mix_marked)) for t in trials}):
        everyone = [t for t in trials if t.setting == setting and _table_mark(t, mix_marked) == mark]
        section = _section(setting, mark)
        mine = [t for t in everyone if t.results]
        names, common = _datasets(mine, setting)
        groups = row_groups(mine)
        for group, base in zip(groups, group_baselines(groups, baseline), strict=True):
            for name in names:
                values = [t.results[name].value for t in group if name in t.results]
                if values:
                    rows.append(_row_fields(section, group, _metric(group, name), next(
                        t.results[name].title for t in group if name in t.results), sample(values),
                        compare_dataset(group, base, name) if base else None))
            if common:
                rows.append(_row_fields(section, group, "mean", f"mean of {len(common)}",
                                        sample(_means(group, common)),
                                        _compare_mean(group, base, common) if base else None))
        shot = row_groups([t for t in everyone if t.fewshot])
        for group, base in zip(shot, group_baselines(shot, baseline), strict=True):
            for column, found in _shots_of(group).items():
                theirs = _shots_of(base).get(column) if base else None
                compared = welch(shots_sample(found), shots_sample(theirs), _label(base[0])) \
                    if base and theirs else None
                rows.append({**_row_fields(section + "|fewshot", group, f"{column[1]}-shot", group[0].titles[
                    column[0]], shots_sample(found), compared), "task": FEWSHOT_TASK,
                    "protocol": "linear-transfer-fewshot"})
    return rows


def _shots_of(group: list[Trial]) -> dict[tuple[str, int], list[Shots]]:
    """A row's k-shot results by (dataset, k), one a trial."""
    found: dict[tuple[str, int], list[Shots]] = {}
    for trial in group:
        for key, shots in trial.fewshot.items():
            for s in shots:
                found.setdefault((key, s.shots), []).append(s)
    return found


def _row_fields(section: str, group: list[Trial], metric: str, dataset: str, x: Sample,
                compared: Comparison | None) -> dict[str, str]:
    p = group[0].pretraining
    return {"section": section, "origin": "ours", "status": "row", "task": TASK, "protocol": "linear-transfer",
            "pretraining": p.label, "method": p.method or "", "arch": p.arch, "dataset": dataset,
            "metric": metric, "mean": repr(round(x.mean, 6)), "std": "" if x.std is None else repr(round(x.std, 6)),
            "n": str(len(group)), "files": "; ".join(t.run for t in group),
            "note": f"std over {x.n} tries" if x.unit == "tries" else "",
            "smoke": "yes" if group[0].smoke else "no", "pretrain_unfinished": p.unfinished_field,
            **(compared.csv_fields() if compared else {})}


def _trial_rows(trials: list[Trial], mix_marked: bool) -> list[dict[str, str]]:
    rows = []
    for t in trials:
        base = {"section": _section(t.setting, _table_mark(t, mix_marked)), "origin": "ours", "status": "ok",
                "task": TASK, "protocol": "linear-transfer", "pretraining": t.pretraining.label,
                "method": t.pretraining.method or "", "arch": t.pretraining.arch,
                "sha256": t.pretraining.sha256 or "", "n": "1", "files": t.run, "smoke": "yes" if t.smoke else "no",
                "pretrain_unfinished": t.pretraining.unfinished_field}
        rows += [{**base, "dataset": r.header or r.dataset, "metric": r.metric, "mean": repr(round(r.value, 6))}
                 for r in t.results.values()]
        rows += [{**base, "section": base["section"] + "|fewshot", "task": FEWSHOT_TASK,
                  "protocol": "linear-transfer-fewshot", "dataset": t.titles[key], "metric": f"{s.shots}-shot",
                  "mean": repr(round(s.mean, 6)), "std": repr(round(s.std, 6)), "note": f"std over {s.tries} tries"}
                 for key, shots in t.fewshot.items() for s in shots]
    return rows
