"""Expected results of the embedded presets (``expected.csv``, measured with several trials), and the check that
flags a run outside them: a quick answer to "is my install working?".

A row of ``expected.csv`` applies to a row of our tables when the setting is the same (task, protocol, evaluation
data, detector model and schedule) and so are the backbone (random init, or our MoCo or supervised pretraining of
that arch) and both recipes: the pretraining's config and the evaluation's, each less its ``run`` section, seeds
and paths (:func:`reports.pretraining.recipe_digest`), with the version of generated data the record names (the
embedded shapes' for linear and kNN, the scenes' for detection). Any change to a preset changes its recipe, and
the row no longer applies: expected values are only claimed for the exact commands that measured them
(``benchmarks/expected_ranges.py`` writes the file from a ``moco demo --trials N`` directory).

A mean outside ``mean ± max(3 std, FLOOR)`` of the expected row is flagged in the row's note.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from reports.summary import Entry

EXPECTED_CSV = Path(__file__).with_name("expected.csv")
COLUMNS = ("task", "protocol", "dataset", "engine", "model", "schedule", "backbone", "arch", "pretrain_recipe",
           "eval_recipe", "metric", "mean", "std", "n", "measured")
FLOOR = 1.0  # points: the tolerance never goes below this, however close the measured trials were
WIDTH = 3.0  # standard deviations of the measured trials


@dataclass(frozen=True)
class Expected:
    mean: float
    std: float
    n: int
    measured: str  # where and how: "3 trials, moco demo on 2 CPU cores, 2026-11-23"

    @property
    def tolerance(self) -> float:
        return max(WIDTH * self.std, FLOOR)

    def holds(self, value: float) -> bool:
        return abs(value - self.mean) <= self.tolerance


def backbone_of(entry: Entry) -> str | None:
    """"random", "moco" or "supervised" (our pretrainings of those methods); None for anything else."""
    p = entry.pretraining
    if p.kind == "random":
        return "random"
    if p.kind == "ours" and p.method == "moco":
        return "moco"
    return "supervised" if p.kind == "supervised" else None


def key_of(entry: Entry) -> tuple[str, ...] | None:
    """The columns of expected.csv before ``metric`` that an entry must equal; None when nothing can apply."""
    backbone = backbone_of(entry)
    if backbone is None or entry.eval_recipe is None or entry.sweep is not None:
        return None
    s, p = entry.setting, entry.pretraining
    recipe = "" if backbone == "random" else (p.recipe or "")
    return (s.task, s.protocol, s.dataset, s.engine or "", s.model or "", s.schedule or "", backbone, p.arch,
            recipe, entry.eval_recipe)


def load_expected(path: Path = EXPECTED_CSV) -> dict[tuple[str, ...], dict[str, Expected]]:
    """(key columns) -> {metric: Expected}."""
    table: dict[tuple[str, ...], dict[str, Expected]] = {}
    if not path.is_file():
        return table
    with path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            key = tuple(row[c] for c in COLUMNS[:10])
            table.setdefault(key, {})[row["metric"]] = Expected(float(row["mean"]), float(row["std"]), int(row["n"]),
                                                                row["measured"])
    return table


def flags(entry: Entry, expected: dict[tuple[str, ...], dict[str, Expected]]) -> tuple[list[str], bool]:
    """(one note per metric outside its expected range, whether an expected row applied at all)."""
    key = key_of(entry)
    rows = expected.get(key) if key is not None else None
    if not rows or entry.n == 0:
        return [], False
    out = []
    for metric, exp in rows.items():
        stat = entry.metrics.get(metric)
        if stat is None or stat.n == 0 or not math.isfinite(stat.mean):
            continue
        if not exp.holds(stat.mean):
            out.append(f"{metric} {stat.mean:.1f} is outside the expected {exp.mean:.1f} ± {exp.tolerance:.1f} "
                       f"({exp.measured}): is the install working?")
    return out, True
