"""Revisitop's evaluation (filipradenovic/revisitop, ``python/evaluate.py`` ``compute_map``; arXiv 1803.11285),
written from its definition: average precision as the trapezoid area under the precision-recall steps, junk
images taken out of the ranking before positions are counted, and mean precision at k.

The protocols pick the positives and the junk of each query from its ground truth (``easy``, ``hard``, ``junk``):
Easy: easy positive, hard and junk ignored; Medium: easy and hard positive, junk ignored; Hard: hard positive,
easy and junk ignored. "Ignored" is revisitop's junk: the image is removed from the ranking, so it neither counts
against precision nor pushes later positives down. A query without a positive under a protocol is left out of
that protocol's mean (revisitop's ``nempty``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PROTOCOLS = ("easy", "medium", "hard")


@dataclass(frozen=True)
class Truth:
    """One query's ground truth: database indices (0-based) of its easy and hard positives and of its junk."""

    easy: tuple[int, ...]
    hard: tuple[int, ...]
    junk: tuple[int, ...]

    def split(self, protocol: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(positives, ignored) of ``protocol``, as revisitop's ``example_evaluate.py`` builds them."""
        if protocol == "easy":
            return self.easy, self.junk + self.hard
        if protocol == "medium":
            return self.easy + self.hard, self.junk
        if protocol == "hard":
            return self.hard, self.junk + self.easy
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")


def positive_positions(ranking: np.ndarray, positives: Sequence[int], ignored: Sequence[int]) -> np.ndarray:
    """The 0-based positions of the positives in ``ranking`` (database indices, best first), each lowered by the
    ignored images ranked strictly before it: their positions in the ranking with the ignored taken out. (P,)"""
    at_positive = np.flatnonzero(np.isin(ranking, np.asarray(positives, dtype=np.int64)))
    at_ignored = np.flatnonzero(np.isin(ranking, np.asarray(ignored, dtype=np.int64)))
    return at_positive - np.searchsorted(at_ignored, at_positive, side="left")


def average_precision(positions: np.ndarray, positives: int) -> float:
    """The trapezoids under the precision-recall curve: at the j-th positive found (0-based, at position r), recall
    rises by 1 / ``positives`` and precision goes from j / r (1 at r = 0) to (j + 1) / (r + 1); each step adds
    the mean of the two times the rise. ``positives``: how many the ground truth lists (found or not)."""
    found = np.arange(len(positions), dtype=np.float64)
    r = positions.astype(np.float64)
    before = np.where(r == 0, 1.0, found / np.maximum(r, 1.0))
    after = (found + 1) / (r + 1)
    return float((before + after).sum() / (2 * positives))


def precision_at(positions: np.ndarray, k: int) -> float:
    """Revisitop's precision at ``k``: the share of positives among the first min(k, last positive's 1-based
    position) results, so a query with fewer positives than k is not held to k."""
    ranks = positions + 1
    cut = min(int(ranks.max()), k)
    return float((ranks <= cut).sum() / cut)


def evaluate(ranks: np.ndarray, truths: Sequence[Truth], protocol: str,
             kappas: Sequence[int] = (1, 5, 10)) -> dict[str, float]:
    """mAP and mP@k of ``protocol`` in percent, from ``ranks`` (Q, N): each query's database indices, best first.
    ``{"map": .., "mp@1": .., ...}``; NaN where no query has a positive under the protocol."""
    aps, precisions = [], []
    for ranking, truth in zip(ranks, truths, strict=True):
        positives, ignored = truth.split(protocol)
        if not positives:  # revisitop's nempty: out of the mean
            continue
        positions = positive_positions(ranking, positives, ignored)
        aps.append(average_precision(positions, len(positives)))
        precisions.append([precision_at(positions, k) for k in kappas])
    if not aps:
        return {"map": float("nan"), **{f"mp@{k}": float("nan") for k in kappas}}
    mean = np.mean(precisions, axis=0)
    return {"map": 100 * float(np.mean(aps)), **{f"mp@{k}": 100 * float(p) for k, p in zip(kappas, mean, strict=True)}}
