"""The labelled layouts ``--data`` may point at, told apart by what is on disk, and the content digest records name
a dataset by.

- ImageFolder: ``train/<class>/*`` and ``val/<class>/*`` (ImageNet's layout); ``test/`` stands in for a missing
  ``val/`` (CIFAR-10/100 exported from torchvision to folders ship ``train/`` and ``test/``).
- Oxford Flowers-102 as torchvision's ``Flowers102`` downloads it: ``flowers-102/jpg/image_00001.jpg``,
  ``imagelabels.mat`` (a class 1-102 per image) and ``setid.mat`` (``trnid``, ``valid``, ``tstid``). The
  evaluation trains on ``trnid`` + ``valid`` (2,040 images) and tests on ``tstid`` (6,149): the split transfer
  studies of linear probes report (Kornblith et al., arXiv 1805.08974, train on train+val after choosing
  hyperparameters on val).
- Oxford-IIIT Pets as torchvision's ``OxfordIIITPet`` downloads it: ``oxford-iiit-pet/images/<name>.jpg`` and
  ``annotations/trainval.txt``, ``annotations/test.txt`` (``<name> <class 1-37> <species> <breed>`` a line);
  trains on trainval (3,680), tests on test (3,669). A class is named by its images' prefix (``Abyssinian``).

``--data`` may name the dataset's folder or the folder torchvision was given (which holds ``flowers-102/`` or
``oxford-iiit-pet/``).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moco_core.config import ConfigError
from moco_core.data.data import show_value
from moco_core.data.matfile import read_mat
from moco_core.user_files import LINES_LIMIT, LIST_LIMIT, all_within, inside, read_bytes, read_text

FLOWERS, PETS = "flowers-102", "oxford-iiit-pet"


@dataclass(frozen=True)
class Listed:
    """A dataset whose splits and labels come from annotation files: (path, label) samples and class names."""

    kind: str  # "flowers-102", "oxford-iiit-pet"
    root: Path
    train: list[tuple[str, int]]
    val: list[tuple[str, int]]
    classes: list[str]
    annotations: list[Path]  # the files the labels and splits come from (part of the content digest)


def find_listed(root: Path) -> Listed | None:
    """Flowers-102 or Pets at ``root`` (or in its ``flowers-102/`` / ``oxford-iiit-pet/``), else None; a file
    that a link takes out of that folder is ConfigError (:func:`moco_core.user_files.all_within`)."""
    for kind, marker, read in ((FLOWERS, "imagelabels.mat", _flowers), (PETS, "annotations/trainval.txt", _pets)):
        for where in (root, root / kind):
            if (where / marker).is_file():
                listed = read(where)
                files = [*listed.annotations, *(p for p, _ in listed.train + listed.val)]
                all_within(where, files, what="data.path: file", error=ConfigError)
                return listed
    return None


def _flowers(root: Path) -> Listed:
    labels_file, splits_file = root / "imagelabels.mat", root / "setid.mat"
    if not os.path.lexists(splits_file):  # there but not a regular file: said where it is read
        raise ConfigError(f"data.path: {root} has imagelabels.mat but no setid.mat (Flowers-102's splits)")
    labels = read_mat(labels_file).get("labels")
    splits = read_mat(splits_file)
    missing = [k for k in ("trnid", "valid", "tstid") if k not in splits]
    if labels is None or missing:
        raise ConfigError(f"data.path: {labels_file if labels is None else splits_file} lacks "
                          f"{'labels' if labels is None else ', '.join(missing)} (Flowers-102's fields)")
    labels = labels.reshape(-1).astype(np.int64)
    classes = sorted(set(labels.tolist()))

    def samples(ids: np.ndarray) -> list[tuple[str, int]]:
        out = []
        for i in sorted(int(x) for x in ids.reshape(-1)):
            if not 1 <= i <= len(labels):
                raise ConfigError(f"data.path: {splits_file} names image {i}, but imagelabels.mat labels "
                                  f"{len(labels)}")
            out.append((str(root / "jpg" / f"image_{i:05d}.jpg"), classes.index(int(labels[i - 1]))))
        return out

    train = samples(np.concatenate([splits["trnid"].reshape(-1), splits["valid"].reshape(-1)]))
    return Listed(FLOWERS, root, train, samples(splits["tstid"]), [f"{c:03d}" for c in classes],
                  [labels_file, splits_file])


def _pets(root: Path) -> Listed:
    lists = [root / "annotations" / "trainval.txt", root / "annotations" / "test.txt"]
    if not os.path.lexists(lists[1]):  # there but not a regular file: said where it is read
        raise ConfigError(f"data.path: {root} has annotations/trainval.txt but no annotations/test.txt (Pets' "
                          f"test split)")
    names: dict[int, str] = {}
    parsed = []
    for path in lists:
        rows = []
        text = read_text(path, limit=LIST_LIMIT, what="data.path: Pets list", error=ConfigError,
                         lines=LINES_LIMIT)
        for number, line in enumerate(text.splitlines(), 1):
            fields = line.split()
            if not fields or line.startswith("#"):
                continue
            if len(fields) < 2 or not fields[1].isdigit():
                raise ConfigError(f"data.path: {path} line {number}: {show_value(line)} is not '<image> <class> "
                                  f"...'")
            rows.append((fields[0], int(fields[1])))
            names.setdefault(int(fields[1]), fields[0].rsplit("_", 1)[0])
        parsed.append(rows)
    ids = sorted(names)
    index = {c: i for i, c in enumerate(ids)}
    train, val = ([(str(inside(root / "images", f"{name}.jpg", what=f"data.path: {path}: image",
                               error=ConfigError)), index[c]) for name, c in rows]
                  for rows, path in zip(parsed, lists, strict=True))
    return Listed(PETS, root, train, val, [names[c] for c in ids], lists)


def content_digest(root: Path, files: list[str], annotations: list[Path] = ()) -> str:
    """SHA-256 of every image's path below ``root`` and size, sorted, then of the annotation files' bytes: a cheap
    identity (one stat per image, no image read) that changes when a file is added, removed, renamed, moved to
    another class or resized, or when the labels change; equal copies of a dataset in two places share it."""
    digest = hashlib.sha256()
    for rel, size in sorted((os.path.relpath(f, root), _size(f)) for f in files):
        digest.update(f"{rel}\0{size}\n".encode("utf-8", "surrogateescape"))
    for path in annotations:
        digest.update(f"{os.path.relpath(path, root)}\0".encode("utf-8", "surrogateescape"))
        digest.update(hashlib.sha256(read_bytes(path, limit=LIST_LIMIT, what="data.path: annotation file",
                                                error=ConfigError)).digest())
    return digest.hexdigest()


def _size(path: str) -> int:
    """The file's size; -1 for one an annotation names but the disk lacks."""
    try:
        return os.stat(path).st_size
    except OSError:
        return -1
