"""The splits a suite run uses, drawn where the dataset ships none, and written into the run so that they can be
read back, compared and reused: ``<run>/splits/<dataset>.json``, whose SHA-256 goes into the dataset's record.

Drawn, with ``numpy`` generators seeded by ``SeedSequence([seed, class index])``, so a draw does not depend on the
order classes are listed in:
- train / test from a pool (Caltech-101: 30 a class for train, the rest test; SUN397 without its Partitions
  files: 50 and 50 a class, split 1's shape); a class too small for that keeps one image for test;
- val from train where the dataset ships no val: ``val_fraction`` of each class (at least one image, and at
  least one left in train); under the ``ssl-transfer`` protocol, ssl-transfer's own draw instead
  (:func:`hold_out_plain`: not stratified, numpy's legacy generator).

A split file holds every image of every split (its path relative to the dataset's folder, and its label), the
seed and how each split came about. A run that finds its split file (``--resume``) reads it back, its names
through :func:`moco_core.user_files.inside`: the splits are never drawn twice.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from classification.linear_transfer.catalog import Spec
from classification.linear_transfer.readers import Found, Split, SuiteDataError
from moco_core import user_files
from moco_core.checkpoint import write_atomic

SPLITS_FORMAT = 1


@dataclass
class Splits:
    """train / val / test of one dataset, and their provenance for the record."""

    train: Split
    val: Split
    test: Split
    provenance: dict[str, Any] = field(default_factory=dict)


def _by_class(split: Split) -> dict[Any, list[int]]:
    groups: dict[Any, list[int]] = {}
    for i, (_, label) in enumerate(split.samples):
        groups.setdefault(label, []).append(i)
    return groups


def _rng(seed: int, label: Any) -> np.random.Generator:
    key = [int(label)] if isinstance(label, int) else [int(v) + 1 for v in label]
    return np.random.default_rng(np.random.SeedSequence([seed, *key]))


def draw_pool(pool: Split, train: int, test: int | None, seed: int) -> tuple[Split, Split]:
    """``train`` images a class for train, ``test`` (None: the rest) for test, in the pool's order."""
    chosen: dict[str, list[int]] = {"train": [], "test": []}
    for label, index in _by_class(pool).items():
        order = [index[i] for i in _rng(seed, label).permutation(len(index))]
        # A class of at most `train` images (none in the real datasets; the fixtures' and smoke runs' small ones)
        # keeps one image for test.
        n = min(train, len(order) - 1)
        chosen["train"] += order[:n]
        chosen["test"] += order[n:] if test is None else order[n:n + test]
    return pool.take(sorted(chosen["train"])), pool.take(sorted(chosen["test"]))


def hold_out(train: Split, fraction: float, seed: int) -> tuple[Split, Split]:
    """(the rest of train, val): ``fraction`` of each class's images, at least 1, never the class's last."""
    kept, val = [], []
    for label, index in _by_class(train).items():
        order = [index[i] for i in _rng(seed, label).permutation(len(index))]
        n = min(max(1, round(fraction * len(order))), len(order) - 1)
        val += order[:n]
        kept += order[n:]
    return train.take(sorted(kept)), train.take(sorted(val))


def hold_out_plain(train: Split, fraction: float, seed: int) -> tuple[Split, Split]:
    """(the rest of train, val) as ssl-transfer's ``linear.py`` draws them: the indices 0..n-1 shuffled by numpy's
    legacy generator seeded with ``seed`` (``np.random.seed``, then ``np.random.shuffle`` of the list), the first
    ``floor(fraction n)`` for val. Not stratified: a small class may end up wholly in one part."""
    order = list(range(len(train.samples)))
    np.random.RandomState(seed).shuffle(order)
    n = int(np.floor(fraction * len(order)))
    return train.take(sorted(order[n:])), train.take(sorted(order[:n]))


def check_labels(found: Found) -> None:
    """Every label a reader found names one of the dataset's classes: a class index in [0, K), or for multi-label
    data K values of 1 / 0 / -1. A list file's class 0 where classes count from 1, or a CIFAR batch's label 10 of
    ten classes, would otherwise be trained on as a class of its own, or crash the solver. The training images
    (train, or the pool it is drawn from) must hold two classes or more: one class would score 100%."""
    k = len(found.classes)
    if k == 0:
        raise SuiteDataError(f"{found.folder} names no class")
    for name in ("pool", "train", "val", "test"):
        part = getattr(found, name)
        for path, label in part.samples if part is not None else []:
            if isinstance(label, tuple):
                fits = len(label) == k and all(isinstance(v, int) and v in (-1, 0, 1) for v in label)
            else:
                fits = isinstance(label, int) and not isinstance(label, bool) and 0 <= label < k
            if not fits:
                try:
                    shown = str(label)[:40]
                except ValueError:  # an int past Python's digit limit
                    shown = "a number beyond 4300 digits"
                raise SuiteDataError(f"{name} image {path} has label {shown}, not one of its {k} "
                                     f"classes (an index 0 to {k - 1}; multi-label: {k} values of 1, 0, -1)")
    training = found.train if found.train is not None else found.pool
    seen = {label for _, label in training.samples} if training is not None else set()
    if len(seen) == 1 and not isinstance(next(iter(seen)), tuple):  # a classifier of one class scores 100%
        split, only = "train" if found.train is not None else "pool", found.classes[next(iter(seen))]
        raise SuiteDataError(f"{found.folder}: every {split} image is of one class ({only}, of {k}): a classifier "
                             f"needs two or more")


def resolve(spec: Spec, found: Found, path: Path, *, seed: int, val_fraction: float, plain_val: bool = False
            ) -> Splits:
    """The dataset's splits: read back from ``path`` when it exists (a resumed run), else shipped or drawn, and
    written to ``path``; the provenance names each split's origin, the seed and the file's SHA-256. The labels
    are checked first (:func:`check_labels`). ``plain_val``: val drawn as ssl-transfer draws it
    (:func:`hold_out_plain`), not stratified."""
    check_labels(found)
    how: dict[str, str] = {}
    if found.pool is not None and spec.draw is not None:
        found.train, found.test = draw_pool(found.pool, *spec.draw, seed)
        count = "the rest" if spec.draw[1] is None else f"{spec.draw[1]} a class"
        how["train"] = how["test"] = f"drawn: {spec.draw[0]} a class for train, {count} for test"
    if found.train is None or found.test is None:
        raise SuiteDataError(f"{found.folder} holds no train and test split")
    how.setdefault("train", found.note or "shipped")
    how.setdefault("test", found.note or "shipped")
    if found.val is None and plain_val:
        found.train, found.val = hold_out_plain(found.train, val_fraction, seed)
        how["val"] = f"drawn: a plain random {val_fraction:.0%} of train (ssl-transfer's draw)"
    elif found.val is None:
        found.train, found.val = hold_out(found.train, val_fraction, seed)
        how["val"] = f"drawn: {val_fraction:.0%} of each class of train"
    else:
        how["val"] = "shipped"
    splits = Splits(found.train, found.val, found.test)
    if path.exists():
        splits = read_split_file(path, spec, found)
        how = {k: f"read back from {path.name} ({v})" for k, v in how.items()}
    else:
        write_split_file(path, spec, found.folder, splits, seed=seed, how=how)
    splits.provenance = {"file": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                         "seed": seed, "how": how}
    return splits


def _rel(folder: Path, sample_path: str) -> str:
    return os.path.relpath(sample_path, folder) if "#" not in sample_path else sample_path.rsplit("/", 1)[-1]


def write_split_file(path: Path, spec: Spec, folder: Path, splits: Splits, *, seed: int, how: dict[str, str]) -> None:
    doc = {"format": SPLITS_FORMAT, "dataset": spec.name, "folder": str(folder), "seed": seed, "how": how,
           **{name: [[_rel(folder, p), label] for p, label in getattr(splits, name).samples]
              for name in ("train", "val", "test")}}
    data = json.dumps(doc, separators=(",", ":")).encode()
    write_atomic(path, lambda f: f.write(data), what="split file")


def read_split_file(path: Path, spec: Spec, found: Found) -> Splits:
    """The splits a run wrote, matched against the dataset as it is now: each entry must name one of its images
    (the same label); a CIFAR entry its row of a batch."""
    doc = user_files.read_json(path, limit=user_files.LIST_LIMIT, what="split file", error=SuiteDataError,
                               values=user_files.VALUES_LIMIT)
    if not isinstance(doc, dict) or doc.get("format") != SPLITS_FORMAT or doc.get("dataset") != spec.name:
        raise SuiteDataError(f"{path}: not a split file of {spec.name} (format {SPLITS_FORMAT})")
    known = {}
    for part in (found.pool, found.train, found.val, found.test):
        for i, (p, label) in enumerate(part.samples if part is not None else []):
            known[_rel(found.folder, p)] = (part, i, label)
    out = []
    for name in ("train", "val", "test"):
        rows = doc.get(name)
        if not isinstance(rows, list) or not rows:
            raise SuiteDataError(f"{path}: no {name} split")
        index: list[tuple[Split, int]] = []
        for row in rows:
            if not (isinstance(row, list) and len(row) == 2 and isinstance(row[0], str)):
                raise SuiteDataError(f"{path}: {name} entry {str(row)[:60]} is not [file name, label]")
            if "#" not in row[0]:
                user_files.inside(found.folder, row[0], what=f"file name in {path}", error=SuiteDataError)
            hit = known.get(row[0])
            label = tuple(row[1]) if isinstance(row[1], list) else row[1]
            if hit is None or hit[2] != label:
                raise SuiteDataError(f"{path}: {name} names {row[0][:80]!r} (label {str(row[1])[:40]}), which "
                                     f"{spec.name} under {found.folder} does not hold with that label")
            index.append((hit[0], hit[1]))
        out.append(_gather(index))
    return Splits(*out)


def _gather(index: list[tuple[Split, int]]) -> Split:
    samples = [part.samples[i] for part, i in index]
    if index and index[0][0].arrays is not None:
        return Split(samples, np.stack([part.arrays[i] for part, i in index]))  # type: ignore[index]
    return Split(samples)
