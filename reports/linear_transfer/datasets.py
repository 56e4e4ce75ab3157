"""Which dataset a transfer suite record is of: the famous one it is named after, or a user's folder in its layout.

``moco eval transfer --data ROOT`` reads whatever lies under ROOT in a dataset's file layout, so scikit-learn's
digits written as ``cifar-10-batches-py`` are recorded as ``cifar10`` (issue 57). A record is named after the
famous dataset only when it holds that dataset's released sizes: its classes, its train + val images and its
test images (the record's ``dataset.classes``, ``train_images``, ``val_images``, ``test_images``, written by
classification/linear_transfer/run.py) as the suite reads the release
(classification/linear_transfer/catalog.py: the shipped splits;
Caltech-101's 30 images a class of its 102 with BACKGROUND_Google, the rest test; SUN397's split 1 shape, 50 and
50 a class). Anything else is the user's own data, named by the folder it was read from and the layout it borrows
("digits (CIFAR-10 layout)"): its own table, and never beside the published rows of the dataset it imitates.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

# The suite's columns in SimCLR's Table 8 order (arXiv 2002.05709; CUB-200-2011 in Birdsnap's place, as DINOv2's)
REAL = ("food101", "cifar10", "cifar100", "cub200", "sun397", "cars", "aircraft", "voc2007", "dtd", "pets",
        "caltech101", "flowers")
HEADERS = {"food101": "Food", "cifar10": "CIFAR10", "cifar100": "CIFAR100", "cub200": "CUB", "sun397": "SUN397",
           "cars": "Cars", "aircraft": "Aircraft", "voc2007": "VOC07", "dtd": "DTD", "pets": "Pets",
           "caltech101": "Caltech", "flowers": "Flowers"}
LAYOUTS = {"food101": "Food-101", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "cub200": "CUB-200-2011",
           "sun397": "SUN397", "cars": "Stanford Cars", "aircraft": "FGVC Aircraft", "voc2007": "VOC 2007",
           "dtd": "DTD", "pets": "Oxford-IIIT Pets", "caltech101": "Caltech-101", "flowers": "Flowers-102"}
# (classes, train + val images, test images) as released and split by the suite
RELEASED = {"food101": (101, 75_750, 25_250), "cifar10": (10, 50_000, 10_000), "cifar100": (100, 50_000, 10_000),
            "cub200": (200, 5_994, 5_794), "sun397": (397, 19_850, 19_850), "cars": (196, 8_144, 8_041),
            "aircraft": (100, 6_667, 3_333), "voc2007": (20, 5_011, 4_952), "dtd": (47, 3_760, 1_880),
            "pets": (37, 3_680, 3_669), "caltech101": (102, 3_060, 6_086), "flowers": (102, 2_040, 6_149)}
REAL_SUITE = "real datasets"
OWN_SUITE = "own data in the suite's layouts"


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def sizes(dataset: dict[str, Any]) -> tuple[int | None, int | None, int | None]:
    """(classes, train + val images, test images) a record's ``dataset`` states (None where it does not)."""
    train, val = _count(dataset.get("train_images")), _count(dataset.get("val_images"))
    return (_count(dataset.get("classes")), train + val if train is not None and val is not None else None,
            _count(dataset.get("test_images")))


def is_released(name: str, dataset: dict[str, Any]) -> bool:
    """Whether the record of ``name`` holds the released dataset (see the module docstring)."""
    return name in RELEASED and sizes(dataset) == RELEASED[name]


def own_column(name: str, dataset: dict[str, Any]) -> tuple[str, str]:
    """(column key, header) of a user's folder read in ``name``'s layout: the folder ``--data`` named, and the
    layout ("digits (CIFAR-10 layout)"); the key keeps two folders in one layout apart."""
    root = dataset.get("path") if isinstance(dataset.get("path"), str) else ""
    folder = PurePath(root).name or root or "own data"
    return f"{name}\0{root}", f"{folder} ({LAYOUTS.get(name, name)} layout)"
