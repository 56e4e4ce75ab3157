"""The transfer suite's few-shot results (task ``transfer-fewshot``, ``<dataset>/fewshot.result.json``): k labelled
images a class drawn ``tries`` times, each draw's lambda chosen on val, the test set scored
(classification/suite/run.py). The record holds each k's mean and standard deviation over the tries; the table
shows both and the tries, a row a suite run (d564f78 read these records nowhere and said "skipped: none").
Nothing here imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from reports.records import RecordError
from reports.tables import MISSING, Cell, Column, Row, Table, fmt

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


def fewshot_table(key: str, title: str, labels: list[str], results: list[dict[str, list[Shots]]],
                  titles: dict[str, str]) -> Table:
    """A row a suite run (``labels[i]``, ``results[i]``: dataset -> its k-shot results), a column a dataset and k:
    mean +- std over the tries, and the tries of the row."""
    columns_of = sorted({(n, s.shots) for r in results for n, shots in r.items() for s in shots},
                        key=lambda c: (list(titles).index(c[0]), c[1]))
    columns = (Column("pretraining"), *(Column(f"{titles[n]} {k}-shot", True) for n, k in columns_of),
               Column("tries", True))
    rows = []
    for label, result in zip(labels, results, strict=True):
        found = {(n, s.shots): s for n, shots in result.items() for s in shots}
        cells = [Cell(fmt(s.mean), fmt(s.std)) if (s := found.get(c)) else Cell(MISSING) for c in columns_of]
        tries = sorted({s.tries for s in found.values()})
        rows.append(Row((Cell(label), *cells, Cell(", ".join(map(str, tries))))))
    notes = ["Few-shot: k labelled images a class drawn at random for each try, the L2 strength chosen on val, "
             "the test set scored; mean ± standard deviation over the tries (one suite run a row)."]
    return Table(key, title, columns, rows, notes=notes)
