"""The transfer suite's 12 datasets as their archives unpack (torchvision's download layouts, and CUB-200-2011's
own), shrunk to a few images of 2-3 classes but with the real folder and file names, list formats and label
encodings: the fixtures of ``moco eval transfer --data ROOT`` (tests/classification/linear_transfer/, README's command).

:func:`transfer_suite_layout` writes all 12 under one ROOT, each where torchvision's class given ROOT looks.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
from PIL import Image


def _jpeg(path: Path, rng: np.random.Generator, size: tuple[int, int] = (40, 48)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    coarse = rng.integers(0, 256, (size[1] // 8 + 1, size[0] // 8 + 1, 3), dtype=np.uint8)
    Image.fromarray(coarse).resize(size, Image.BICUBIC).save(path, quality=90)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


FOOD = {"apple_pie": ("1005649", "1011328", "101251"), "baby_back_ribs": ("1007102", "1009507", "1020564")}


def food101(root: Path) -> None:
    """food-101/images/<class>/<id>.jpg, meta/{train,test}.json ({class: ["class/id", ...]}), classes.txt."""
    rng, base = np.random.default_rng(10), root / "food-101"
    meta: dict[str, dict[str, list[str]]] = {"train": {}, "test": {}}
    for cls, ids in FOOD.items():
        for n, image_id in enumerate(ids):
            _jpeg(base / "images" / cls / f"{image_id}.jpg", rng)
            meta["test" if n == 2 else "train"].setdefault(cls, []).append(f"{cls}/{image_id}")
    for split, content in meta.items():
        _write(base / "meta" / f"{split}.json", json.dumps(content))
    _write(base / "meta" / "classes.txt", "".join(f"{c}\n" for c in FOOD))
    _write(base / "meta" / "labels.txt", "Apple pie\nBaby back ribs\n")


def _batch(path: Path, obj: dict) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)  # as the archives' python batches (written by Python 2's cPickle)


def cifar10(root: Path, per_batch: int = 3) -> None:
    """cifar-10-batches-py/data_batch_1..5, test_batch ({data (N, 3072) uint8, labels, filenames}), batches.meta."""
    rng, base = np.random.default_rng(11), root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = [int(v) for v in rng.integers(0, 3, per_batch)]
        _batch(base / name, {"batch_label": name, "labels": labels,
                             "data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                             "filenames": [f"img_{i}.png" for i in range(per_batch)]})
    _batch(base / "batches.meta", {"num_cases_per_batch": per_batch, "label_names": names, "num_vis": 3072})


def cifar100(root: Path, count: int = 8) -> None:
    rng, base = np.random.default_rng(12), root / "cifar-100-python"
    base.mkdir(parents=True)
    for name in ("train", "test"):
        fine = [int(v) for v in np.arange(count) % 3]
        _batch(base / name, {"filenames": [f"f_{i}.png" for i in range(count)], "batch_label": name,
                             "fine_labels": fine, "coarse_labels": [0] * count,
                             "data": rng.integers(0, 256, (count, 3072), dtype=np.uint8)})
    _batch(base / "meta", {"fine_label_names": ["apple", "aquarium_fish", "baby"],
                           "coarse_label_names": ["fruit_and_vegetables"]})


SUN = {"a/abbey": 3, "b/bakery/shop": 3, "c/cabin/outdoor": 3}


def sun397(root: Path, partitions: bool = False) -> None:
    """SUN397/ClassName.txt (/a/abbey), SUN397/<letter>/<class>/sun_<16 letters>.jpg; with ``partitions`` the
    official Training_01.txt / Testing_01.txt beside them."""
    rng, base = np.random.default_rng(13), root / "SUN397"
    rows: dict[str, list[str]] = {"Training_01.txt": [], "Testing_01.txt": []}
    for c, (cls, count) in enumerate(SUN.items()):
        for n in range(count):
            name = "sun_" + "".join(chr(97 + (c * 7 + n * 3 + k) % 26) for k in range(16)) + ".jpg"
            _jpeg(base / cls / name, rng)
            rows["Testing_01.txt" if n == 0 else "Training_01.txt"].append(f"/{cls}/{name}")
    _write(base / "ClassName.txt", "".join(f"/{c}\n" for c in SUN))
    if partitions:
        for name, lines in rows.items():
            _write(base / name, "".join(f"{line}\n" for line in lines))


def stanford_cars(root: Path) -> None:
    """stanford_cars/devkit/{cars_meta.mat,cars_train_annos.mat}, cars_test_annos_withlabels.mat, cars_train/,
    cars_test/ (5-digit names); the annotations are MAT-file struct arrays, as the devkit's."""
    from scipy.io import savemat

    rng, base = np.random.default_rng(14), root / "stanford_cars"
    classes = ["AM General Hummer SUV 2000", "Acura RL Sedan 2012", "Acura TL Sedan 2012"]
    (base / "devkit").mkdir(parents=True)
    savemat(base / "devkit" / "cars_meta.mat", {"class_names": np.array([classes], dtype=object)})
    fields = [("bbox_x1", "O"), ("bbox_y1", "O"), ("bbox_x2", "O"), ("bbox_y2", "O"), ("class", "O"), ("fname", "O")]
    for folder, annos, labels in (("cars_train", base / "devkit" / "cars_train_annos.mat", (1, 2, 3, 1, 2)),
                                  ("cars_test", base / "cars_test_annos_withlabels.mat", (3, 1, 2))):
        rows = np.zeros((1, len(labels)), dtype=fields)
        for i, label in enumerate(labels):
            name = f"{i + 1:05d}.jpg"
            _jpeg(base / folder / name, rng)
            rows[0, i] = (np.array([[2]]), np.array([[3]]), np.array([[30]]), np.array([[40]]),
                          np.array([[label]], dtype=np.uint8), np.array([name]))
        savemat(annos, {"annotations": rows})


AIRCRAFT = ("707-320", "727-200", "A300B4")


def fgvc_aircraft(root: Path) -> None:
    """fgvc-aircraft-2013b/data/images/<7 digits>.jpg, variants.txt, images_variant_{train,val,trainval,test}.txt
    (``1025794 707-320``; variant names may hold spaces: ``Cessna 172``)."""
    rng, base = np.random.default_rng(15), root / "fgvc-aircraft-2013b" / "data"
    rows: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    number = 1025794
    for variant in (*AIRCRAFT, "Cessna 172"):
        for split in rows:
            number += 17
            _jpeg(base / "images" / f"{number:07d}.jpg", rng)
            rows[split].append(f"{number:07d} {variant}")
    rows["trainval"] = rows["train"] + rows["val"]
    for split, lines in rows.items():
        _write(base / f"images_variant_{split}.txt", "".join(f"{line}\n" for line in lines))
    _write(base / "variants.txt", "".join(f"{v}\n" for v in (*AIRCRAFT, "Cessna 172")))


def dtd(root: Path) -> None:
    """dtd/dtd/images/<class>/<class>_<4 digits>.jpg and labels/{train,val,test}{1..10}.txt (partition 1 and 2
    here), ``banded/banded_0002.jpg`` a line."""
    rng, base = np.random.default_rng(16), root / "dtd" / "dtd"
    for partition in (1, 2):
        rows: dict[str, list[str]] = {"train": [], "val": [], "test": []}
        for cls in ("banded", "blotchy", "braided"):
            for n, split in enumerate(rows):
                name = f"{cls}/{cls}_{(n + partition) % 3 * 10 + 2:04d}.jpg"
                if partition == 1:
                    _jpeg(base / "images" / name, rng)
                rows[split].append(name)
        for split, lines in rows.items():
            _write(base / "labels" / f"{split}{partition}.txt", "".join(f"{line}\n" for line in lines))


def caltech101(root: Path) -> None:
    """caltech101/101_ObjectCategories/<category>/image_<4 digits>.jpg, BACKGROUND_Google included."""
    rng, base = np.random.default_rng(17), root / "caltech101" / "101_ObjectCategories"
    for cls, count in (("BACKGROUND_Google", 3), ("Faces_easy", 4), ("accordion", 5)):
        for n in range(1, count + 1):
            _jpeg(base / cls / f"image_{n:04d}.jpg", rng)
    (root / "caltech101" / "Annotations").mkdir()


VOC = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow", "diningtable", "dog",
       "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor")


def voc2007(root: Path) -> None:
    """VOCdevkit/VOC2007/JPEGImages/<6 digits>.jpg, Annotations/<6 digits>.xml, ImageSets/Main/{train,val,
    trainval,test}.txt and <class>_<split>.txt for VOC's 20 classes (``000005 -1``; 0: difficult)."""
    rng, base = np.random.default_rng(18), root / "VOCdevkit" / "VOC2007"
    ids = {"train": ["000012", "000017"], "val": ["000005", "000007"], "test": ["000001", "000002", "000004"]}
    ids["trainval"] = sorted(ids["train"] + ids["val"])
    for split in ("train", "val", "test"):
        for image_id in ids[split]:
            _jpeg(base / "JPEGImages" / f"{image_id}.jpg", rng, (50, 40))
            _write(base / "Annotations" / f"{image_id}.xml", f"<annotation><filename>{image_id}.jpg</filename>"
                   "<object><name>dog</name><difficult>0</difficult></object></annotation>\n")
    for split, names in ids.items():
        _write(base / "ImageSets" / "Main" / f"{split}.txt", "".join(f"{i}\n" for i in names))
        for c, cls in enumerate(VOC):
            values = [1 if (c + n) % 3 == 0 else 0 if (c + n) % 7 == 0 else -1 for n, _ in enumerate(names)]
            if split in ("train", "val", "trainval"):
                values[0] = 1  # every class a positive in train and val
            _write(base / "ImageSets" / "Main" / f"{cls}_{split}.txt",
                   "".join(f"{i} {v:2d}\n" for i, v in zip(names, values, strict=True)))


CUB = ("001.Black_footed_Albatross", "002.Laysan_Albatross")


def cub200(root: Path) -> None:
    """CUB_200_2011/images/<nnn.Class_Name>/<Class_Name>_<n>_<n>.jpg, images.txt, image_class_labels.txt,
    train_test_split.txt (1: train), classes.txt."""
    rng, base = np.random.default_rng(19), root / "CUB_200_2011"
    rows: dict[str, list[str]] = {"images": [], "image_class_labels": [], "train_test_split": []}
    number = 0
    for c, cls in enumerate(CUB, 1):
        bird = cls.split(".", 1)[1].replace("footed", "Footed")
        for n in range(4):
            number += 1
            rel = f"{cls}/{bird}_{n + 9:04d}_{34 + n}.jpg"
            _jpeg(base / "images" / rel, rng)
            rows["images"].append(f"{number} {rel}")
            rows["image_class_labels"].append(f"{number} {c}")
            rows["train_test_split"].append(f"{number} {int(n < 3)}")
    for name, lines in rows.items():
        _write(base / f"{name}.txt", "".join(f"{line}\n" for line in lines))
    _write(base / "classes.txt", "".join(f"{c} {name}\n" for c, name in enumerate(CUB, 1)))


def flowers(root: Path) -> None:
    """flowers-102/jpg/image_<5 digits>.jpg, imagelabels.mat (``labels``, doubles, classes from 1), setid.mat
    (``trnid``, ``valid``, ``tstid``: uint16 image numbers from 1, as the archive's: torchvision formats them with
    ``:05d``), written by scipy as MATLAB's save does."""
    from scipy.io import savemat

    rng, base = np.random.default_rng(20), root / "flowers-102"
    labels = (1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3)
    for i in range(1, len(labels) + 1):
        _jpeg(base / "jpg" / f"image_{i:05d}.jpg", rng)
    savemat(base / "imagelabels.mat", {"labels": np.array([labels], dtype=np.float64)})
    savemat(base / "setid.mat", {"trnid": np.array([[1, 2, 3]], dtype=np.uint16),
                                 "valid": np.array([[4, 5, 6]], dtype=np.uint16),
                                 "tstid": np.array([[7, 8, 9, 10, 11, 12]], dtype=np.uint16)})


def pets(root: Path) -> None:
    from tests.layouts import pets_layout

    pets_layout(root, trainval=3, test=2)


LAYOUTS = {"food101": food101, "cifar10": cifar10, "cifar100": cifar100, "cub200": cub200, "sun397": sun397,
           "cars": stanford_cars, "aircraft": fgvc_aircraft, "dtd": dtd, "pets": pets, "caltech101": caltech101,
           "flowers": flowers, "voc2007": voc2007}


def transfer_suite_layout(root: Path, only: tuple[str, ...] | None = None) -> Path:
    """The 12 datasets (or ``only`` these) under ``root``; returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for name, write in LAYOUTS.items():
        if only is None or name in only:
            write(root)
    return root
