"""iNaturalist 2018 as its competition ships it (github.com/visipedia/inat_comp, the 2018 edition).

``ROOT/train2018.json`` and ``ROOT/val2018.json`` are COCO-like: ``images`` (``id``, ``file_name``),
``annotations`` (``image_id``, ``category_id``: one per image) and ``categories`` (``id``, ``name``, ...). The
images of both splits are under ``ROOT/train_val2018/<supercategory>/<category id>/<hash>.jpg``, and each
``file_name`` names its image from ROOT (``train_val2018/Plantae/7477/3b60c948....jpg``). 8,142 categories,
437,513 train and 24,426 val images. Labels are the category ids in increasing order: id ``k`` is class ``k`` for
the official files, whose ids are 0..8141. The files are read through :mod:`moco_core.user_files`: numbers beyond
64 bits are malformed JSON, and a ``file_name`` that is absolute or climbs out of ROOT with ``..`` is refused
(:func:`moco_core.user_files.inside`), as is an image a link takes out of ROOT
(:func:`moco_core.user_files.all_within`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from moco_core.data.data import DatasetError
from moco_core.errors import show
from moco_core.user_files import ANNOTATION_LIMIT, all_within, inside, read_json

TRAIN_JSON = "train2018.json"
VAL_JSON = "val2018.json"
IMAGES = "train_val2018"


def is_inat_layout(root: Path) -> bool:
    """Whether ``root`` holds iNaturalist 2018's annotation files (then its images are read through them)."""
    return (root / TRAIN_JSON).is_file() or (root / VAL_JSON).is_file()


def _read(path: Path) -> dict[str, Any]:
    if not os.path.lexists(path):  # there but not a regular file (a FIFO, a link to a device): read_json says so
        raise DatasetError(f"data.path: {path.parent} has {TRAIN_JSON if path.name == VAL_JSON else VAL_JSON} but "
                           f"no {path.name} (iNaturalist 2018's layout needs both)")
    data = read_json(path, limit=ANNOTATION_LIMIT, what="iNaturalist annotation file", error=DatasetError)
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in ("images", "annotations")):
        raise DatasetError(f"{path}: not an iNaturalist annotation file (needs lists 'images' and 'annotations')")
    return data


def _samples(root: Path, data: dict[str, Any], where: Path) -> list[tuple[str, int]]:
    """(absolute image path, category id) for each image of one split, in the file's order of images."""
    try:
        files = {int(im["id"]): im["file_name"] for im in data["images"]}
        labels = {int(a["image_id"]): int(a["category_id"]) for a in data["annotations"]}
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise DatasetError(f"{where}: an image or annotation lacks {err} (images need id and file_name, "
                           f"annotations image_id and category_id)") from None
    unlabelled = [i for i in files if i not in labels]
    if unlabelled:
        raise DatasetError(f"{where}: {len(unlabelled)} image(s) have no annotation (first: id {unlabelled[0]})")
    samples = [(str(inside(root, name, what=f"{where}: image {i}: file_name", error=DatasetError)), labels[i])
               for i, name in files.items()]
    all_within(root, (p for p, _ in samples), what=f"{where}: image", error=DatasetError)
    missing = [p for p, _ in samples if not os.path.isfile(p)]
    if missing:
        raise DatasetError(f"{where}: {len(missing)} of its {len(samples)} images are missing (first: "
                           f"{show(missing[0])}); the images belong under {root / IMAGES}")
    if not samples:
        raise DatasetError(f"{where}: lists no images")
    return samples


def inat_splits(root: Path) -> tuple[list[tuple[str, int]], list[tuple[str, int]], list[str]]:
    """(train samples, val samples, class names) of an iNaturalist 2018 root; labels index the sorted category
    ids of the train file's ``categories`` (or, without that list, of its annotations)."""
    train_data, val_data = _read(root / TRAIN_JSON), _read(root / VAL_JSON)
    train = _samples(root, train_data, root / TRAIN_JSON)
    val = _samples(root, val_data, root / VAL_JSON)
    categories = train_data.get("categories")
    try:
        ids = sorted({int(c["id"]) for c in categories} if isinstance(categories, list) and categories
                     else {label for _, label in train})
    except (KeyError, TypeError, ValueError, OverflowError):
        raise DatasetError(f"{root / TRAIN_JSON}: a category lacks its id") from None
    index = {category: k for k, category in enumerate(ids)}
    unknown = sorted({label for _, label in train + val if label not in index})
    if unknown:
        raise DatasetError(f"{root}: category id {unknown[0]} is annotated but not among the {len(ids)} categories "
                           f"of {TRAIN_JSON}")
    return ([(p, index[c]) for p, c in train], [(p, index[c]) for p, c in val], [str(c) for c in ids])
