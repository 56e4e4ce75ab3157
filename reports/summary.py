"""Grouping records into settings and trials: mean, sample standard deviation and trial count per group.

A *setting* is what was evaluated where and for how long: task, protocol, evaluation dataset (and its number of
classes), the epochs or iterations trained and, for detection, the engine, detector model and schedule. Within a
setting, records of the same pretraining (method, arch, pretraining data, epochs, checkpoint SHA-256 or recipe)
are trials of one row. Records carrying ``sweep`` are ablation runs: they are grouped by (mechanism, arch,
pretraining data, epochs, the recipe less the swept field, swept value) instead, since each trial is a new
checkpoint of another seed, and appear only in the ablation tables. Failed records are counted and their reasons
kept, but their numbers never enter a mean. Records of smoke runs (``MOCO_SMOKE=1``, or weights a smoke run made),
and evaluations of pretrainings stopped before their planned epochs, are settings of their own (:func:`mark`):
their tables are apart from those of finished real runs (unless the report is asked to mix them), and a smoke
record is never a trial of a row of real runs.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from reports.pretraining import Pretraining, method_rank
from reports.protocols import length_key, paper_length
from reports.records import DEFAULT_K, SWEEP_PARAMS, TASK_ORDER, Record, Sweep, table_views

PROTOCOL_ORDER = ("linear", "linear-mocov3", "linear-cached", "linear-grid", "linear-grid-selected-on-val",
                  "finetune", "knn", "voc", "coco", "keypoints", "lvis", "cityscapes", "densepose")


@dataclass(frozen=True)
class Stat:
    """Trials of one metric."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def std(self) -> float | None:
        """Sample standard deviation (n - 1 in the denominator); None for a single trial."""
        return statistics.stdev(self.values) if self.n > 1 else None


@dataclass(frozen=True)
class Setting:
    """What was evaluated, where: one table."""

    task: str
    protocol: str
    dataset: str
    dataset_path: str
    engine: str | None = None
    model: str | None = None
    schedule: str | None = None
    length: int | None = None  # epochs (linear) or iterations (detection) trained; None: kNN, or not recorded
    classes: int | None = None
    labels: str | None = None  # the subset of the train labels ("10%"); None: all of them
    data_digest: str | None = None  # the evaluation folder's content digest, where the records name it
    k: int | None = None  # kNN: the neighbours voting (runs of other k are other tables)
    mark: str | None = None  # a table of "smoke" runs, or of "unfinished" pretrainings: apart from finished real ones

    @classmethod
    def of(cls, record: Record, *, mix_marked: bool = False) -> Setting:
        return cls(record.task, record.protocol, record.dataset, record.dataset_path, record.engine, record.model,
                   record.schedule, record.eval_length, record.classes, record.labels, record.data_digest, record.k,
                   None if mix_marked else mark(record))

    @property
    def smoke(self) -> bool:
        return self.mark == "smoke"

    @property
    def key(self) -> str:
        """A short id of the setting, used as the CSV ``section`` column."""
        parts = [self.task, self.protocol, self.dataset_path, self.engine, self.model, self.schedule, length_key(self),
                 f"labels {self.labels}" if self.labels else None,
                 f"k {self.k}" if self.k not in (None, DEFAULT_K) else None, self.mark]
        return ":".join(p for p in parts if p)

    def sort_key(self) -> tuple[Any, ...]:
        protocol = PROTOCOL_ORDER.index(self.protocol) if self.protocol in PROTOCOL_ORDER else len(PROTOCOL_ORDER)
        # the preset's length first, then longer runs before shorter ones; a table of marked rows after its own
        return (TASK_ORDER.index(self.task), protocol, self.protocol, self.dataset_path, self.engine or "",
                self.model or "", self.schedule or "", self.length != paper_length(self), -(self.length or 0),
                self.classes or 0, self.k or 0, self.mark or "")


def label_order(labels: str | None) -> tuple[int, float, str]:
    """All labels first, then fractions by size ("1%" before "10%"), then subset files by name."""
    if labels is None:
        return (0, 0.0, "")
    head = labels.split()[0]
    try:
        return (1, float(head.rstrip("%")), labels) if head.endswith("%") else (2, 0.0, labels)
    except ValueError:
        return (2, 0.0, labels)


@dataclass
class Entry:
    """One row: the trials of one pretraining (or one ablation point) in one setting."""

    setting: Setting
    pretraining: Pretraining
    sweep: Sweep | None = None
    metrics: dict[str, Stat] = field(default_factory=dict)
    per_class: dict[str, Stat] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    n: int = 0  # successful trials
    chosen: list[str] = field(default_factory=list)  # a head grid's chosen head, one per successful trial
    eval_recipe: str | None = None  # the evaluation config its trials share (None: they differ)
    smoke: bool = False  # its trials are smoke runs (MOCO_SMOKE=1, or of weights a smoke run made)
    invocation: dict[str, Any] | None = None  # how its first trial that says so was asked for (records.Record)
    spread: dict[str, tuple[float, int]] = field(default_factory=dict)  # one few-shot trial's (std, tries)

    @property
    def failed(self) -> bool:
        """Every trial failed: the row shows the failure instead of numbers."""
        return self.n == 0 and bool(self.failures)


def pretraining_identity(p: Pretraining) -> tuple[Any, ...]:
    """What makes two records trials of the same pretraining: the same weights, or for our pretrainings the same
    recipe (config less seed and paths: trials with other seeds). The checkpoint path does not."""
    return (p.kind, p.method, p.arch, p.data_path, p.epochs, p.partial_steps, p.recipe or p.sha256)


def mechanism_identity(p: Pretraining, sweep: Sweep) -> tuple[Any, ...]:
    """One curve of an ablation: its points differ in the swept value, its trials of a point in their seeds."""
    return (sweep.param, sweep.method, p.arch, p.data_path, p.epochs, p.partial_steps, sweep.series)


def same_data(records: Iterable[Record]) -> list[Record]:
    """Records of one evaluation folder's content (``data_digest``) found at several paths (a copy on another disk
    or machine) name it by the first of those paths in sorted order, so that they share a setting."""
    records = list(records)
    first: dict[str, Record] = {}
    for record in sorted(records, key=lambda r: r.dataset_path):
        if record.data_digest:
            first.setdefault(record.data_digest, record)
    return [dataclasses.replace(r, dataset_path=first[r.data_digest].dataset_path,
                                dataset=first[r.data_digest].dataset) if r.data_digest else r for r in records]


def mark(record: Record) -> str | None:
    """What keeps a record out of the tables of finished real runs: "smoke" (a smoke run, or weights a smoke run
    made: numbers that mean nothing), "unfinished" (a pretraining stopped before its planned epochs, not a
    snapshot kept on the way), or None."""
    if record.smoke:
        return "smoke"
    return "unfinished" if record.pretraining.unfinished else None


def group(records: Iterable[Record], *, mix_marked: bool = False) -> tuple[list[Entry], list[Entry]]:
    """(main entries, ablation entries), each sorted into table order. ``mix_marked``: the rows of smoke runs and
    unfinished pretrainings in the tables of finished real runs (still rows of their own, marked), not apart."""
    main: dict[tuple[Any, ...], list[Record]] = {}
    ablation: dict[tuple[Any, ...], list[Record]] = {}
    for record in same_data(view for r in records for view in table_views(r)):  # retrieval: a table per variant
        setting = Setting.of(record, mix_marked=mix_marked)
        if record.sweep is None:
            main.setdefault((setting, pretraining_identity(record.pretraining), record.smoke), []).append(record)
        else:
            key = (setting, mechanism_identity(record.pretraining, record.sweep), record.sweep.value, record.smoke)
            ablation.setdefault(key, []).append(record)
    main_entries = sorted((_entry(trials, key[0]) for key, trials in main.items()), key=entry_sort_key)
    ablation_entries = sorted((_entry(trials, key[0]) for key, trials in ablation.items()), key=ablation_sort_key)
    return main_entries, ablation_entries


def _entry(trials: list[Record], setting: Setting) -> Entry:
    first = trials[0]
    ok = [r for r in trials if r.ok]
    pretraining = first.pretraining
    if len({r.pretraining.sha256 for r in trials}) > 1:  # pretrainings with several seeds: no one hash names them
        pretraining = dataclasses.replace(pretraining, sha256=None)
    recipes = {r.eval_recipe for r in trials}
    entry = Entry(setting=setting, pretraining=pretraining, sweep=first.sweep, n=len(ok),
                  eval_recipe=recipes.pop() if len(recipes) == 1 else None,
                  failures=[r.failure or "no reason given" for r in trials if not r.ok],
                  files=sorted(r.path for r in trials), smoke=any(r.smoke for r in trials),
                  chosen=[r.chosen for r in ok if r.chosen],
                  invocation=next((r.invocation for r in trials if r.invocation is not None), None),
                  spread=ok[0].spread if len(ok) == 1 else {})
    for name in _ordered_union(r.metrics for r in ok):
        entry.metrics[name] = Stat(tuple(r.metrics[name] for r in ok if name in r.metrics))
    for name in _ordered_union(r.per_class for r in ok):
        entry.per_class[name] = Stat(tuple(r.per_class[name] for r in ok if name in r.per_class))
    return entry


def _ordered_union(dicts: Iterable[dict[str, float]]) -> list[str]:
    seen: dict[str, None] = {}
    for d in dicts:
        seen.update(dict.fromkeys(d))
    return list(seen)


def entry_sort_key(entry: Entry) -> tuple[Any, ...]:
    return (entry.setting.sort_key(), entry.pretraining.sort_key(), entry.smoke)


def ablation_sort_key(entry: Entry) -> tuple[Any, ...]:
    sweep = entry.sweep
    assert sweep is not None
    p = entry.pretraining
    # MoCo v3's curves after the others of their setting: their table comes next (reports.tables.ablation_tables)
    return (SWEEP_PARAMS.index(sweep.param), entry.setting.sort_key(), sweep.method == "mocov3",
            method_rank(sweep.method), p.arch, p.data or "", p.epochs or 0, p.partial_steps, sweep.series or "",
            sweep.value)


def supervised_reference(entries: list[Entry]) -> tuple[Entry | None, str]:
    """The supervised row differences are taken to, and a note saying which (or why there is none).

    The unique supervised row of the setting; where there are several, the unique one from torchvision weights
    (the paper's ImageNet-supervised baseline); otherwise none.
    """
    candidates = [e for e in entries if e.pretraining.is_supervised and e.n > 0]
    if len(candidates) > 1:
        candidates = [e for e in candidates if e.pretraining.kind == "torchvision"]
    if not candidates:
        return None, "No supervised row in this setting: no differences shown."
    if len(candidates) > 1:
        return None, "Several supervised rows in this setting: no differences shown."
    return candidates[0], f"Differences are to the supervised row ({candidates[0].pretraining.label})."


def delta(entry: Entry, reference: Entry | None, metric: str) -> float | None:
    """mean(entry) - mean(reference) for ``metric``; None for the reference itself or where either is missing."""
    if reference is None or entry is reference or metric not in entry.metrics or metric not in reference.metrics:
        return None
    value = entry.metrics[metric].mean - reference.metrics[metric].mean
    return value if math.isfinite(value) else None
