"""Which published transfer rows (published.csv, tasks ``transfer_linear`` and ``transfer_finetune``) stand beside
a transfer suite table, which are listed apart and why, and the mean beside each (issue 57).

A published row and ours are one measurement only when both were made the same way, so a published row is beside
a table's rows only where
- its protocol is the table's solver protocol (the record's ``config.solver.protocol``,
  classification/linear_transfer/config.py PROTOCOLS): Ericsson et al.'s Table 1 (arXiv 2011.13377) was measured by
  ssl-transfer's ``linear.py``, which the suite's "ssl-transfer" protocol reproduces; SimCLR's Table B.5 (arXiv
  2002.05709, appendix B.8: L-BFGS over 45 values of lambda from 1e-6 to 1e5, the refit on train + val) by the protocol
  the "converged" one follows, and so DINOv2's Table 8 (arXiv 2304.07193), which states that it follows SimCLR's; no
  protocol of the suite fine-tunes;
- its backbone is of the family of one of the table's rows (ResNet beside ResNet, ViT beside ViT);
- the table is of the real datasets at 224 px, finished runs (the caller's condition).
Rows that fail the first two are named under the table with the reason; those of no dataset of the table are not.
A published row's mean is over the datasets of the table's mean that it has, marked with their count where it has
fewer, and a note gives ours over the same datasets. Nothing here imports torch.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from moco_core.solver_protocols import CONVERGED, SSL_TRANSFER
from reports.pretraining import short_arch
from reports.published import PublishedRow
from reports.tables import MISSING, Cell, fmt

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
LINEAR_TASK = "transfer_linear"
FINETUNE_TASK = "transfer_finetune"
# A published row's protocol (its ``schedule`` in published.csv) -> (the suite's solver protocol that measures as
# it did, or None where none does; what it is)
PROTOCOLS = {
    "ssl-transfer linear.py": (SSL_TRANSFER, "ssl-transfer's linear.py (100 iterations a value, weakest first, "
                                               "the first best kept)"),
    "SimCLR L-BFGS logistic regression": (CONVERGED, "SimCLR's L-BFGS logistic regression (appendix B.8)"),
    "DINOv2 logistic regression": (CONVERGED, "DINOv2's logistic regression (SimCLR's protocol, as DINOv2 states)"),
    "fine-tuned (5,000 SGD steps)": (None, "fine-tuning the whole network (5,000 SGD steps)"),
}


def protocol_of(row: PublishedRow) -> tuple[str | None, str]:
    """(the suite's solver protocol that measures as ``row`` was measured, or None; what its protocol is)."""
    return PROTOCOLS.get(row.schedule, (None, row.schedule))


def family(backbone: str) -> str | None:
    """"ResNet" or "ViT" of a published backbone or our short arch name ("R50", "R18 (CIFAR stem)", "ViT-S/14")."""
    if re.match(r"R\d", backbone):
        return "ResNet"
    return "ViT" if backbone.startswith("ViT-") else None


@dataclass
class Placement:
    """The published rows of a table: those beside its rows, and those apart with the reason."""

    beside: list[PublishedRow] = field(default_factory=list)
    apart: list[tuple[PublishedRow, str]] = field(default_factory=list)

    def notes(self) -> list[str]:
        """One line a source of the rows beside (their protocol said), one a source and reason of those apart."""
        lines = []
        for source, rows in _by(self.beside, lambda p: p.source).items():
            lines.append(f"Published ({source}), measured by {protocol_of(rows[0])[1]}: {_names(rows)}.")
        for (source, reason), pairs in _by(self.apart, lambda pair: (pair[0].source, pair[1])).items():
            lines.append(f"Published rows not shown ({source}: {_names([p for p, _ in pairs])}): {reason}.")
        return lines


def _by(items: Iterable[T], key: Callable[[T], K]) -> dict[K, list[T]]:
    """``items`` grouped by ``key``, in the order of their first item."""
    groups: dict[K, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def _names(rows: list[PublishedRow]) -> str:
    return ", ".join(f"{p.pretrain} ({p.backbone})" for p in rows)


def place(published: list[PublishedRow], protocol: str, archs: Iterable[str], names: list[str]) -> Placement:
    """The published transfer rows of a real-datasets table at 224 px whose rows were measured by the solver
    ``protocol`` on backbones ``archs``, with the datasets ``names`` (see the module docstring)."""
    ours = {family(short_arch(a)) for a in archs} - {None}
    placed = Placement()
    for row in published:
        if row.task not in (LINEAR_TASK, FINETUNE_TASK) or (row.task == LINEAR_TASK
                                                            and not any(n in row.values for n in names)):
            continue
        theirs, what = protocol_of(row)
        reasons = []
        if theirs != protocol:
            how = (f"moco eval transfer --set solver.protocol={theirs} measures as they did" if theirs
                   else "no protocol of moco eval transfer measures as they did")
            reasons.append(f"they were measured by {what}, not by the {protocol} protocol; {how}")
        if family(row.backbone) not in ours:
            reasons.append(f"their backbone is a {family(row.backbone) or row.backbone}, ours "
                           f"{' and '.join(sorted(ours)) or 'of no known family'}")
        if reasons:
            placed.apart.append((row, "; ".join(reasons)))
        else:
            placed.beside.append(row)
    return placed


def published_mean(row: PublishedRow, common: list[str]) -> Cell:
    """The mean of ``row`` over the datasets of the table's mean (``common``) it has: "72.6", "72.6 (of 11)" where
    it has fewer of them; missing where it has none."""
    shared = [row.values[n] for n in common if n in row.values]
    if not shared:
        return Cell(MISSING)
    return Cell(fmt(statistics.fmean(shared)) + (f" (of {len(shared)})" if len(shared) < len(common) else ""))


def mean_notes(beside: list[PublishedRow], common: list[str], titles: dict[str, str],
               ours: list[tuple[str, list[dict[str, float]]]]) -> list[str]:
    """For the published rows whose mean is over fewer of ``common`` than ours: which datasets, and the mean of
    each of ``ours`` (label, its trials' values by dataset) over the same ones (the mean of its trials' means)."""
    notes = []
    for shared in _by(beside, lambda p: tuple(n for n in common if n in p.values)):
        if not shared or len(shared) == len(common):
            continue
        means = [f"{label}: {fmt(statistics.fmean(statistics.fmean(t[n] for n in shared) for t in trials))}"
                 for label, trials in ours]
        left = ", ".join(titles[n] for n in common if n not in shared)
        notes.append(f"Published means marked (of {len(shared)}): over {', '.join(titles[n] for n in shared)}, the "
                     f"datasets of the mean those rows have ({left} not among them); ours over the same "
                     f"{len(shared)}: {'; '.join(means)}.")
    return notes
