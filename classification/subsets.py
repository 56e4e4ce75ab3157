"""Semi-supervised subsets of a labelled train split: a class-balanced fraction of its labels, or a list of file names.

Two ways to name the images a run trains on (validation always uses the whole val split):

- ``data.labels: "1%" | "10%"`` (any percentage in (0, 100]): from each class c of n_c images, round(f n_c)
  (halves up), at least 1, drawn without replacement by a generator seeded with ``[data.subset_seed, c]`` from the
  class's images sorted by path. The draw is a pure function of the file list and the seed, so every process of a
  run, and every run with the same seed, takes the same images. ``data.subset_seed`` defaults to 0 and is not the
  run seed: trials with other run seeds train on the same images, as runs on SimCLR's fixed files do.
- ``data.subset: FILE``: the image file names of SimCLR's published ImageNet subsets (google-research/simclr
  ``imagenet_subsets/1percent.txt`` and ``10percent.txt``: one ``n01440764_10026.JPEG`` a line, classes mixed),
  matched by file name among the images of ``train/<class>/``. Blank lines and surrounding spaces are ignored; a
  name given twice counts once (with a warning); a name found in no class folder stops the run.

The record names the subset (:func:`Subset.record`): the fraction and seed, or the file's SHA-256, name and count.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from moco_core.config import ConfigError
from moco_core.data.data import show_value
from moco_core.user_files import LINES_LIMIT, LIST_LIMIT, inside, read_bytes

PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


def parse_labels(text: str) -> float:
    """"10%" -> 0.1; a one-line ConfigError for anything but a percentage in (0, 100]."""
    match = PERCENT.match(text)
    value = float(match.group(1)) if match else math.nan
    if not 0 < value <= 100:
        raise ConfigError(f"data.labels: {show_value(text)} is not a percentage of the train labels in (0, 100], "
                          f"such as 1% or 10%")
    return value / 100


def per_class_count(fraction: float, n: int) -> int:
    """round(fraction n), halves up, at least 1 (a class keeps one image however small the fraction)."""
    return max(1, math.floor(fraction * n + 0.5))


@dataclass(frozen=True)
class Subset:
    """The train images a run keeps, and what its record says about them."""

    samples: list[tuple[str, int]]
    record: dict[str, Any]
    warning: str | None = None


def balanced_draw(samples: list[tuple[str, int]], count: Callable[[int], int], seed: int) -> set[str]:
    """The paths of a class-balanced draw from (path, class) ``samples``: ``count(n)`` of each class of ``n``
    images, drawn with ``default_rng([seed, class])`` from the class's paths sorted (the draw depends on the files,
    not on the order a scan listed them in)."""
    by_class: dict[int, list[str]] = defaultdict(list)
    for path, label in samples:
        by_class[label].append(path)
    drawn: set[str] = set()
    for label, paths in by_class.items():
        ordered = sorted(paths)
        rng = np.random.default_rng([seed, label])
        drawn.update(ordered[i] for i in rng.choice(len(ordered), count(len(ordered)), replace=False))
    return drawn


def fraction_subset(samples: list[tuple[str, int]], labels: str, seed: int) -> Subset:
    """A class-balanced draw of ``labels`` ("10%") of ``samples`` ((path, class) pairs), in their original order."""
    fraction = parse_labels(labels)
    kept = balanced_draw(samples, lambda n: per_class_count(fraction, n), seed)
    subset = [s for s in samples if s[0] in kept]
    return Subset(subset, {"kind": "labels", "labels": labels.strip(), "seed": seed, "images": len(subset),
                           "of": len(samples)})


def read_subset_file(path: Path) -> tuple[list[str], int]:
    """The distinct names of a SimCLR-format list, in file order, and how many lines repeated an earlier name.

    The list is read through :mod:`moco_core.user_files`: a regular file of at most LIST_LIMIT bytes and
    LINES_LIMIT lines (never ``/dev/zero`` or a FIFO), each name relative (:func:`moco_core.user_files.inside`: no
    absolute name, none that climbs out with ``..``)."""
    data = read_bytes(path, limit=LIST_LIMIT, what="data.subset: file", error=ConfigError, lines=LINES_LIMIT)
    try:
        lines = data.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError as err:
        raise ConfigError(f"data.subset: {path} cannot be read as a text file of image names (not UTF-8 at byte "
                          f"{err.start})") from None
    names = [line.strip() for line in lines if line.strip()]
    if not names:
        raise ConfigError(f"data.subset: {path} names no image (expected one file name a line, such as "
                          f"n01440764_10026.JPEG, as SimCLR's 1percent.txt)")
    for name in names:  # a name is a file of train/<class>/: one that leaves the dataset is a mistake, said once
        inside("train/<class>", name, what=f"data.subset: {path}: name", error=ConfigError)
    distinct = list(dict.fromkeys(os.path.basename(n) for n in names))
    return distinct, len(names) - len(distinct)


def file_subset(samples: list[tuple[str, int]], path: Path, *, unreadable: list[str] = ()) -> Subset:
    """The ``samples`` whose file names the list at ``path`` names. ``unreadable``: train files the scan skipped; a
    listed one is left out with a warning rather than reported missing."""
    names, repeated = read_subset_file(path)
    where: dict[str, list[int]] = defaultdict(list)
    for i, (sample, _) in enumerate(samples):
        where[os.path.basename(sample)].append(i)
    skipped = {os.path.basename(p) for p in unreadable}
    missing = [n for n in names if n not in where and n not in skipped]
    if missing:
        raise ConfigError(f"data.subset: {len(missing)} of the {len(names)} names in {path} are not among the train "
                          f"images (first: {show_value(missing[0])}); the names must be files of train/<class>/")
    ambiguous = [n for n in names if len(where.get(n, ())) > 1]
    if ambiguous:
        raise ConfigError(f"data.subset: {len(ambiguous)} names in {path} are files of several class folders "
                          f"(first: {show_value(ambiguous[0])}); a name must pick one image")
    chosen = sorted(where[n][0] for n in names if n in where)
    notes = []
    if repeated:
        notes.append(f"{repeated} lines repeat an earlier name and count once")
    lost = [n for n in names if n not in where]
    if lost:
        notes.append(f"{len(lost)} listed images are unreadable and left out (first: {show_value(lost[0])})")
    digest = hashlib.sha256(read_bytes(path, limit=LIST_LIMIT, what="data.subset: file",
                                       error=ConfigError, lines=LINES_LIMIT)).hexdigest()
    record = {"kind": "file", "file": path.name, "sha256": digest, "names": len(names), "images": len(chosen),
              "of": len(samples)}
    return Subset([samples[i] for i in chosen], record,
                  f"data.subset {path.name}: " + "; ".join(notes) if notes else None)


def select(samples: list[tuple[str, int]], *, labels: str | None, subset: str | None, seed: int,
           unreadable: list[str] = ()) -> Subset | None:
    """The subset the data config names (None: the whole split). ``labels`` and ``subset`` exclude each other."""
    if labels is not None and subset is not None:
        raise ConfigError("data.labels and data.subset: give one (a fraction drawn here, or SimCLR's list)")
    if labels is not None:
        return fraction_subset(samples, labels, seed)
    if subset is not None:
        return file_subset(samples, Path(os.path.expanduser(subset)), unreadable=unreadable)
    return None
