"""Choosing one head of a grid honestly: on a split held out from train, never on the set that is reported.

DINOv2 picks its best linear head on ImageNet val and reports that head's accuracy on the same val
(facebookresearch/dinov2 ``eval/linear.py``: the test set defaults to the validation set), which is optimistic by
the spread of the grid's heads. Here the default holds out a class-balanced fraction of train (10%, as DINOv2's
own logistic-regression evaluation does), trains every head on the rest, picks the head with the best top-1 on
the held-out images, and reports that one head on val. Selecting on val stays possible (``select.split: val``) and is
labelled so wherever its number goes.

The held-out draw: from each class c of n_c train images, round(f n_c) (halves up), at least 1 and at most
n_c - 1 (a class of one image keeps it for training), drawn without replacement by a generator seeded with
``[select.seed, c]`` from the class's images sorted by path: a pure function of the file list and the seed, the
same in every process and every run with that seed.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from classification.subsets import balanced_draw, per_class_count


def held_out_count(fraction: float, n: int) -> int:
    """Images of a class of ``n`` held out: round(fraction n), halves up, within [1, n - 1] (0 when n < 2)."""
    return 0 if n < 2 else min(per_class_count(fraction, n), n - 1)


def held_out_names(paths: Iterable[str], root: Path | None) -> list[str]:
    """The held-out images' paths relative to ``root`` where given, sorted: what the record's digest is of, and
    what a run keeps as its holdout.txt."""
    return sorted(os.path.relpath(p, root) if root is not None else p for p in paths)


def holdout_split(samples: list[tuple[str, int]], fraction: float, seed: int,
                  root: Path | None = None) -> tuple[list[tuple[str, int]], list[tuple[str, int]], dict[str, Any]]:
    """(kept for training, held out, the record of the draw) of (path, class) ``samples``, both in their original
    order. The record names the fraction, seed, counts and the SHA-256 of the held-out paths (relative to
    ``root`` where given, so that a copy of the data elsewhere draws the same digest)."""
    held = balanced_draw(samples, lambda n: held_out_count(fraction, n), seed)
    kept = [s for s in samples if s[0] not in held]
    out = [s for s in samples if s[0] in held]
    digest = hashlib.sha256("\n".join(held_out_names(held, root)).encode("utf-8", "surrogateescape")).hexdigest()
    record = {"kind": "held out from train", "fraction": fraction, "seed": seed, "images": len(out),
              "of": len(samples), "sha256": digest}
    return kept, out, record


def choose(scores: list[float], usable: list[bool], losses: list[float] | None = None) -> int:
    """The index of the best score among the usable heads. A tie (common: 200 held-out images score in steps of
    0.5%) goes to the lower mean cross-entropy on the same images (``losses``), then to the first in grid order."""
    candidates = [i for i, ok in enumerate(usable) if ok]
    if not candidates:
        raise ValueError("no usable head to choose from")
    tiebreak = losses or [0.0] * len(scores)
    return max(candidates, key=lambda i: (scores[i], -tiebreak[i] if math.isfinite(tiebreak[i]) else -math.inf, -i))
