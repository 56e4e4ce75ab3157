"""The transfer suite's few-shot results (task ``transfer-fewshot``, ``<dataset>/fewshot.result.json``): k labelled
images a class drawn ``tries`` times, each draw's lambda chosen on val, the test set scored
(classification/linear_transfer/run.py). The record holds each k's mean and standard deviation over the tries; the table
shows both and the tries, a row a pretraining (d564f78 read these records nowhere and said "skipped: none"): the
mean and standard deviation over its suite runs where it has several, and each column compared with the baseline
row (reports.comparisons).
Nothing here imports torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from reports.comparisons import COMPARISON_NOTE, Sample, column_header, welch
from reports.records import RecordError
from reports.tables import MISSING, Cell, Column, Row, Table, comparison_cell, fmt

FEWSHOT_TASK = "transfer-fewshot"


@dataclass(frozen=True)
class Shots:
    """One dataset's k-shot result of one suite run: mean and std over its tries."""

    shots: int
    mean: float
    std: float
    tries: int


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def parse_shots(data: dict[str, Any]) -> list[Shots]:
    """The record's ``fewshot`` list; RecordError where it is not a list of {shots, tries, mean, std}."""
    raw = data.get("fewshot")
    if not isinstance(raw, list) or not raw:
        raise RecordError("field 'fewshot' is not a non-empty list (of shots, tries, mean, std)")
    found = []
    for item in raw:
        item = item if isinstance(item, dict) else {}
        shots, tries = item.get("shots"), item.get("tries")
        mean, std = _number(item.get("mean")), _number(item.get("std"))
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (shots, tries)) \
                or mean is None or std is None or not 0 <= mean <= 100 or std < 0:
            raise RecordError("field 'fewshot' holds an entry without whole 'shots' and 'tries' and a percentage "
                              "'mean' with its 'std'")
        found.append(Shots(shots, mean, std, tries))
    return found


def shots_sample(trials: list[Shots]) -> Sample:
    """One row's k-shot result on one dataset: over its trials (the mean of each), or one trial's over its tries."""
    if len(trials) == 1:
        one = trials[0]
        return Sample(one.mean, one.std if one.tries > 1 else None, one.tries, "tries")
    means = [t.mean for t in trials]
    return Sample(statistics.fmean(means), statistics.stdev(means), len(means))


def fewshot_table(key: str, title: str, labels: list[str], results: list[list[dict[str, list[Shots]]]],
                  titles: dict[str, str], bases: list[int | None], baseline: str | None) -> Table:
    """A row a pretraining (``labels[i]``, ``results[i]``: each of its suite runs' dataset -> k-shot results), a
    column a dataset and k: mean ± std over the trials (one trial: over its tries), the trials and the tries; each
    column compared with the row ``bases[i]`` (reports.comparisons), where there is one."""
    columns_of = sorted({(n, s.shots) for row in results for r in row for n, shots in r.items() for s in shots},
                        key=lambda c: (list(titles).index(c[0]), c[1]))
    found = [{c: [f[c] for f in (_by_column(r) for r in row) if c in f] for c in columns_of} for row in results]
    samples = [{c: shots_sample(v) for c, v in row.items() if v} for row in found]
    versus = [c for c in columns_of if any(b is not None for b in bases)]
    columns = (Column("pretraining"), Column("n", True),
               *(Column(f"{titles[n]} {k}-shot", True) for n, k in columns_of),
               *(Column(column_header(baseline, f"{titles[n]} {k}-shot"), True) for n, k in versus),
               Column("tries", True))
    rows = []
    for i, (label, row, mine, base) in enumerate(zip(labels, found, samples, bases, strict=True)):
        cells = [Cell(fmt(x.mean), fmt(x.std) if x.std is not None else None) if (x := mine.get(c)) else
                 Cell(MISSING) for c in columns_of]
        compared = [comparison_cell(welch(mine[c], samples[base][c], labels[base])
                                    if base is not None and c in mine and c in samples[base] else None,
                                    is_baseline=i in bases) for c in versus]
        tries = sorted({s.tries for shots in row.values() for s in shots})
        rows.append(Row((Cell(label), Cell(str(len(results[i]))), *cells, *compared,
                         Cell(", ".join(map(str, tries))))))
    notes = ["Few-shot: k labelled images a class drawn at random for each try, the L2 strength chosen on val, "
             "the test set scored; mean ± standard deviation over a row's trials (suite runs), or over the tries "
             "of a one-trial row."]
    return Table(key, title, columns, rows, notes=notes + ([COMPARISON_NOTE] if versus else []))


def _by_column(result: dict[str, list[Shots]]) -> dict[tuple[str, int], Shots]:
    return {(n, s.shots): s for n, shots in result.items() for s in shots}
