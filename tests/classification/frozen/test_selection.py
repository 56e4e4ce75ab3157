"""classification/frozen/selection.py: the held-out draw (hand-worked counts, a pure function of files and seed) and
the choice of a head."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from classification.frozen.selection import choose, held_out_count, holdout_split


def test_held_out_counts_hand_worked() -> None:
    """round(0.1 n), halves up, at least 1 and leaving at least 1 to train on."""
    assert [held_out_count(0.1, n) for n in (0, 1, 2, 5, 14, 15, 250, 1300)] == [0, 0, 1, 1, 1, 2, 25, 130]
    assert held_out_count(0.5, 3) == 2 and held_out_count(0.5, 2) == 1


def test_the_split_is_class_balanced_seeded_and_recorded(tmp_path: Path) -> None:
    samples = [(str(tmp_path / f"c{c}" / f"{i:03d}.png"), c) for c in range(3) for i in range(20 + 5 * c)]
    kept, held, record = holdout_split(samples, 0.1, seed=4, root=tmp_path)
    assert [sum(1 for _, c in held if c == k) for k in range(3)] == [2, 3, 3]  # 2.0, 2.5 -> 3, 3.0
    assert set(kept).isdisjoint(held) and sorted(kept + held) == sorted(samples)
    assert kept == [s for s in samples if s in kept]  # original order kept
    names = sorted(str(Path(p).relative_to(tmp_path)) for p, _ in held)
    assert record == {"kind": "held out from train", "fraction": 0.1, "seed": 4, "images": 8, "of": 75,
                      "sha256": hashlib.sha256("\n".join(names).encode()).hexdigest()}
    again = holdout_split(list(reversed(samples)), 0.1, seed=4, root=tmp_path)  # the scan's order does not matter
    assert sorted(again[1]) == sorted(held) and again[2] == record
    other = holdout_split(samples, 0.1, seed=5, root=tmp_path)
    assert sorted(other[1]) != sorted(held) and other[2]["sha256"] != record["sha256"]


def test_choose_the_best_usable_head_ties_to_the_lower_loss_then_the_first() -> None:
    assert choose([40.0, 55.0, 55.0, 30.0], [True] * 4) == 1
    assert choose([40.0, 55.0, 55.0, 90.0], [True, False, True, False]) == 2  # diverged heads are not candidates
    assert choose([40.0, 55.0, 55.0, 55.0], [True] * 4, [0.5, 1.2, 0.9, 0.9]) == 2  # the tie to the lower loss
    assert choose([55.0, 55.0], [True] * 2, [float("nan"), 2.0]) == 1
    with pytest.raises(ValueError):
        choose([1.0], [False])
