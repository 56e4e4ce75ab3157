"""Revisited Oxford and Paris in revisitop's layout (filipradenovic/revisitop ``python/dataset.py``):
``<root>/<name>/jpg/<image>.jpg`` and ``<root>/<name>/gnd_<name>.pkl``, a pickle of a dict holding ``imlist``
(the database's image names, without ``.jpg``), ``qimlist`` (the queries') and ``gnd``: a dict a query with
``bbx`` (its box, x1 y1 x2 y2 in pixels) and ``easy``, ``hard``, ``junk`` (0-based indices into ``imlist``).

The pickle is read by :func:`moco_core.pickles.load_plain`: plain containers, strings, numbers and numpy arrays
are built, any other global refuses the file before anything runs. Every name is checked to stay inside ``jpg/``,
every index to fall inside ``imlist``, every box to be four finite numbers; each refusal is one line naming the
file and what it held.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from moco_core import user_files
from moco_core.errors import UserError, show
from moco_core.pickles import DAMAGED, RefusedGlobal, load_plain
from probes.retrieval.metric import Truth

DATASETS = ("roxford5k", "rparis6k")  # revisitop's two, the reference's defaults
NAME = re.compile(r"[a-z0-9][a-z0-9_]{0,63}")  # a dataset's folder name: revisitop's are lower-case words
GND_LIMIT = 64 * user_files.MiB  # gnd_roxford5k.pkl is under a MiB


class RetrievalDataError(UserError):
    """A broken revisitop layout or ground-truth file."""


@dataclass(frozen=True)
class Query:
    """A query image, its box (x1, y1, x2, y2, in its own pixels) and ground truth."""

    path: Path
    box: tuple[float, float, float, float]
    truth: Truth


@dataclass(frozen=True)
class RetrievalSet:
    """One dataset read from its layout: the database images in ``imlist``'s order, and the queries."""

    name: str
    folder: Path
    gnd: Path
    images: tuple[Path, ...]
    queries: tuple[Query, ...]

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.folder), "images": len(self.images), "queries": len(self.queries),
                "ground_truth": self.gnd.name}


def read_set(root: Path, name: str) -> RetrievalSet:
    """``root/name`` in revisitop's layout; raises :class:`RetrievalDataError` in one line for what is broken."""
    if not NAME.fullmatch(name):
        raise RetrievalDataError(f"dataset name {show(name)} is not a folder name (lower-case letters, digits, _)")
    folder = root / name
    if not folder.is_dir():
        raise RetrievalDataError(f"{folder}: no such folder; revisitop's layout is {root}/{name}/jpg/*.jpg and "
                                 f"{root}/{name}/gnd_{name}.pkl")
    gnd_path = folder / f"gnd_{name}.pkl"
    data = _ground_truth(gnd_path)
    images_dir = folder / "jpg"
    imlist = _names(data, "imlist", gnd_path)
    qimlist = _names(data, "qimlist", gnd_path)
    entries = data.get("gnd")
    if not isinstance(entries, list | tuple) or len(entries) != len(qimlist):
        raise RetrievalDataError(f"{gnd_path}: 'gnd' must be a list of one dict a query ({len(qimlist)} in "
                                 f"'qimlist'), found {_kind(entries)}")
    images = tuple(user_files.inside(images_dir, f"{n}.jpg", what=f"{gnd_path}: image", error=RetrievalDataError)
                   for n in imlist)
    queries = tuple(Query(user_files.inside(images_dir, f"{n}.jpg", what=f"{gnd_path}: query",
                                            error=RetrievalDataError), _box(entry, gnd_path, i),
                          _truth(entry, gnd_path, i, len(imlist)))
                    for i, (n, entry) in enumerate(zip(qimlist, entries, strict=True)))
    _all_there(images_dir, (*images, *(q.path for q in queries)), gnd_path)
    user_files.all_within(folder, (*images, *(q.path for q in queries)), error=RetrievalDataError)
    return RetrievalSet(name, folder, gnd_path, images, queries)


def _ground_truth(path: Path) -> dict[str, Any]:
    data = user_files.read_bytes(path, limit=GND_LIMIT, what="revisitop ground truth", error=RetrievalDataError)
    try:
        obj = load_plain(data)
    except RefusedGlobal as err:
        raise RetrievalDataError(f"{path}: {err}; a ground-truth file holds only dicts, lists, strings and numbers: "
                                 f"not read") from None
    except DAMAGED as err:
        raise RetrievalDataError(f"{path}: not a readable pickle (truncated or corrupt?): "
                                 f"{show(str(err) or type(err).__name__)}") from None
    if not isinstance(obj, dict) or not {"imlist", "qimlist", "gnd"} <= set(obj):
        keys = ", ".join(sorted(map(str, obj)))[:200] if isinstance(obj, dict) else _kind(obj)
        raise RetrievalDataError(f"{path}: expected revisitop's dict of 'imlist', 'qimlist' and 'gnd', found {keys}")
    return obj


def _kind(value: Any) -> str:
    return f"a {type(value).__name__}" + (f" of {len(value)}" if isinstance(value, Sequence | np.ndarray) else "")


def _names(data: dict[str, Any], key: str, path: Path) -> list[str]:
    names = data[key]
    if not isinstance(names, list | tuple) or not names or len(names) > user_files.LINES_LIMIT \
            or not all(isinstance(n, str) and n for n in names):
        raise RetrievalDataError(f"{path}: '{key}' must be a list of image names (1 to "
                                 f"{user_files.LINES_LIMIT:,} strings), found {_kind(names)}")
    return list(names)


def _box(entry: Any, path: Path, i: int) -> tuple[float, float, float, float]:
    box = entry.get("bbx") if isinstance(entry, dict) else None
    array = _array(box)
    values = list(array.ravel()) if array is not None and array.dtype.kind in "iuf" else []
    ok = len(values) == 4 and all(math.isfinite(float(v)) for v in values)
    if not ok or not (float(values[0]) < float(values[2]) and float(values[1]) < float(values[3])):
        raise RetrievalDataError(f"{path}: 'gnd' entry {i}: 'bbx' must be 4 finite numbers x1 < x2, y1 < y2, "
                                 f"found {show(box, 80)}")
    return tuple(float(v) for v in values)  # type: ignore[return-value]


def _array(value: Any) -> np.ndarray | None:
    """``value`` (a list, a tuple or an array) as an array; None for anything else, a ragged list included."""
    if not isinstance(value, list | tuple | np.ndarray):
        return None
    try:
        return np.asarray(value)
    except (ValueError, TypeError, OverflowError):
        return None


def _truth(entry: Any, path: Path, i: int, images: int) -> Truth:
    found = {}
    for key in ("easy", "hard", "junk"):
        value = entry.get(key)
        array = _array(value)
        if array is None or array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
            raise RetrievalDataError(f"{path}: 'gnd' entry {i}: '{key}' must be a list of image indices, found "
                                     f"{_kind(value)}")
        if array.size and not (0 <= array.min() and array.max() < images):
            raise RetrievalDataError(f"{path}: 'gnd' entry {i}: '{key}' holds index {int(array.max())} or "
                                     f"{int(array.min())}, outside the {images} images of 'imlist'")
        found[key] = tuple(int(v) for v in array)
    return Truth(**found)


def _all_there(folder: Path, paths: Sequence[Path], gnd_path: Path) -> None:
    """Every image the ground truth names is a file in ``folder``: one listing, not a stat an image."""
    try:
        present = set(os.listdir(folder))
    except OSError as err:
        raise RetrievalDataError(f"{folder}: cannot list the images: {err.strerror or err}") from None
    missing = [p for p in paths if p.name not in present or p.parent != folder]
    missing = [p for p in missing if not p.is_file()]
    if missing:
        raise RetrievalDataError(f"{missing[0]}: missing ({len(set(missing))} of the {len(set(paths))} images "
                                 f"{gnd_path.name} names are; revisitop's layout: {folder}/<name>.jpg)")
