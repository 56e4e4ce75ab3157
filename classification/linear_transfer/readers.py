"""The transfer suite's datasets read in the layouts torchvision's dataset classes download (``--data ROOT`` is
the ``root`` those classes are given), never downloading: each reader names exactly the files, labels and order
the torchvision class names (tests/classification/linear_transfer/test_readers.py checks them against the class on each
layout's fixture). The classes are not used to read: they open list files without a size limit and unpickle
CIFAR's batches with ``pickle.load``; here every list and annotation file goes through
:mod:`moco_core.user_files` (regular files, a size limit), every file name read from one through
:func:`moco_core.user_files.inside`, and CIFAR's batches through an unpickler that builds numpy arrays and nothing
else; what a reader found stays inside the dataset's folder after links (:func:`confined`).

Each reader returns a :class:`Found`: the class names and the splits the dataset ships (train, val, test), or
the ``pool`` a split is drawn from where none is shipped (:mod:`classification.linear_transfer.splits`). A sample is
``(path, label)``: a class index, or for VOC 2007 a tuple of 1 (present) / 0 (absent) / -1 (difficult) a class.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from moco_core import user_files
from moco_core.errors import UserError
from moco_core.pickles import load_plain

Sample = tuple[str, Any]


class SuiteDataError(UserError):
    """A dataset of the suite is there but its files are not what its layout says."""


@dataclass
class Split:
    """One split: ``samples`` (path, label) in order; for CIFAR the images are ``arrays`` (N, 32, 32, 3) uint8 and
    each sample's path names its batch file and row (``data_batch_1#17``)."""

    samples: list[Sample]
    arrays: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.samples)

    def take(self, index: list[int]) -> Split:
        return Split([self.samples[i] for i in index], None if self.arrays is None else self.arrays[index])


@dataclass
class Found:
    """What a reader found: ``folder`` (the dataset's own folder), classes, the shipped splits (None where the
    dataset ships none), the ``pool`` to draw from when train/test are not shipped, the list files read."""

    folder: Path
    classes: list[str]
    train: Split | None = None
    val: Split | None = None
    test: Split | None = None
    pool: Split | None = None
    annotations: list[Path] = field(default_factory=list)
    note: str = ""  # how the splits came about, for the record


def _text(path: Path) -> str:
    return user_files.read_text(path, limit=user_files.LIST_LIMIT, what="list file", error=SuiteDataError,
                                lines=user_files.LINES_LIMIT)


def _lines(path: Path) -> list[str]:
    return [line.strip() for line in _text(path).splitlines() if line.strip()]


def _pairs(path: Path) -> dict[str, str]:
    """A list file of ``<id> <value>`` lines as a dict."""
    out = {}
    for line in _lines(path):
        key, sep, value = line.partition(" ")
        if not sep:
            raise SuiteDataError(f"{path}: {line[:60]!r} is not '<id> <value>'")
        out[key] = value.strip()
    return out


def _inside(folder: Path, name: str, listed_in: Path) -> str:
    return str(user_files.inside(folder, name, what=f"file name in {listed_in}", error=SuiteDataError))


def confined(found: Found) -> Found:
    """``found``, once every file it names (list files, CIFAR's batches, images) is checked to stay inside the
    dataset's folder after links (:func:`moco_core.user_files.all_within`; ``MOCO_FOLLOW_LINKS=1`` lifts it): a
    folder of the dataset linked elsewhere is not read. The dataset's folder itself may be a link."""
    parts = (found.train, found.val, found.test, found.pool)
    images = (path for part in parts if part is not None and part.arrays is None for path, _ in part.samples)
    user_files.all_within(found.folder, found.annotations, what="list file", error=SuiteDataError)
    user_files.all_within(found.folder, images, what="image", error=SuiteDataError)
    return found


def whole_number(value: Any, path: Path, what: str) -> int:
    """``value`` (a list file's text, a pickled or MAT-file number) as an int that fits 64 bits; anything else
    (``'abc'``, ``'1.5'``, a 5,000-digit number that ``int()`` refuses past Python's digit limit, NaN, 1e300) is
    one line naming ``what`` in ``path``."""
    number: int | None = None
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        number = int(value)
    elif isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        number = int(value)
    elif isinstance(value, str) and value.isascii() and 0 < len(value.lstrip("-")) <= 19 \
            and value.lstrip("-").isdigit():
        number = int(value)
    if number is None or not -(1 << 63) <= number < 1 << 63:
        shown = f"an integer of {number.bit_length()} bits" if number is not None else repr(value)[:40]
        raise SuiteDataError(f"{path}: {what} {shown} is not a whole number of 64 bits")
    return number


def _index(classes: list[str], name: str, path: Path) -> int:
    try:
        return classes.index(name)
    except ValueError:
        raise SuiteDataError(f"{path}: class {name!r} is not among the dataset's {len(classes)} classes") from None


def food101(root: Path) -> Found:
    base = root / "food-101"
    out = Found(base, [])
    for split in ("train", "test"):
        path = base / "meta" / f"{split}.json"
        meta = user_files.read_json(path, limit=user_files.LIST_LIMIT, what="Food-101 split", error=SuiteDataError,
                                     values=user_files.VALUES_LIMIT)
        if not isinstance(meta, dict) or not all(isinstance(v, list) for v in meta.values()):
            raise SuiteDataError(f"{path}: expected {{class: [\"class/id\", ...]}}")
        out.classes = out.classes or sorted(meta)
        samples = [(_inside(base / "images", f"{rel}.jpg", path), _index(out.classes, name, path))
                   for name, rels in meta.items() for rel in rels]  # the file's order, as torchvision's Food101
        setattr(out, split, Split(samples))
        out.annotations.append(path)
    return out


def _unpickle(path: Path) -> dict[str, Any]:
    data = user_files.read_bytes(path, limit=user_files.LIST_LIMIT, what="CIFAR batch", error=SuiteDataError)
    try:
        obj = load_plain(data)
    except Exception as err:  # a damaged or hostile file: one line
        raise SuiteDataError(f"{path}: not a CIFAR python batch ({str(err).splitlines()[0][:120]})") from None
    if not isinstance(obj, dict):
        raise SuiteDataError(f"{path}: not a CIFAR python batch (a {type(obj).__name__})")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in obj.items()}


def _cifar(root: Path, folder: str, batches: dict[str, list[str]], meta: str, names: str, labels: str) -> Found:
    base = root / folder
    info = _unpickle(base / meta)
    out = Found(base, [str(c) for c in info.get(names, [])], annotations=[base / meta])
    for split, files in batches.items():
        arrays, samples = [], []
        for name in files:
            batch = _unpickle(base / name)
            data, targets = batch.get("data"), batch.get(labels)
            if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[1] != 3072 or \
                    not isinstance(targets, list) or len(targets) != data.shape[0]:
                raise SuiteDataError(f"{base / name}: expected 'data' (N, 3072) and N '{labels}'")
            arrays.append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
            samples += [(f"{base / name}#{i}", whole_number(t, base / name, "label")) for i, t in enumerate(targets)]
            out.annotations.append(base / name)
        setattr(out, split, Split(samples, np.ascontiguousarray(np.concatenate(arrays)).astype(np.uint8)))
    return out


def cifar10(root: Path) -> Found:
    return _cifar(root, "cifar-10-batches-py", {"train": [f"data_batch_{i}" for i in range(1, 6)],
                                                "test": ["test_batch"]}, "batches.meta", "label_names", "labels")


def cifar100(root: Path) -> Found:
    return _cifar(root, "cifar-100-python", {"train": ["train"], "test": ["test"]}, "meta", "fine_label_names",
                  "fine_labels")


def sun397(root: Path) -> Found:
    """Classes from ClassName.txt (``/a/abbey``); split 1 from the official Partitions files
    (Training_01.txt, Testing_01.txt, in SUN397/ or SUN397/Partitions/) where they are there, else drawn."""
    base = root / "SUN397"
    names = base / "ClassName.txt"
    classes = [line[3:].strip() for line in _lines(names)]
    out = Found(base, classes, annotations=[names])
    for where in (base, base / "Partitions"):
        lists = [where / "Training_01.txt", where / "Testing_01.txt"]
        if all(p.is_file() for p in lists):
            for split, path in zip(("train", "test"), lists, strict=True):
                rows = [line.lstrip("/") for line in _lines(path)]
                setattr(out, split, Split([(_inside(base, r, path), _index(classes, r.rsplit("/", 1)[0][2:], path))
                                           for r in rows]))
                out.annotations.append(path)
            out.note = "split 1 of the official Partitions files"
            return out
    files = sorted(base.rglob("sun_*.jpg"))
    out.pool = Split([(str(p), _index(classes, "/".join(p.relative_to(base).parts[1:-1]), p)) for p in files])
    return out


def stanford_cars(root: Path) -> Found:
    from moco_core.data.matfile import parse_mat

    try:
        from scipy.io import loadmat
    except ImportError:
        raise SuiteDataError("Stanford Cars' annotations are MAT-file structs, read with scipy: pip install "
                             "'moco[sklearn]' (or scipy)") from None
    base = root / "stanford_cars"

    def mat(path: Path) -> dict[str, Any]:
        data = user_files.read_bytes(path, limit=user_files.LIST_LIMIT, what="MAT-file", error=SuiteDataError)
        parse_mat(data, path)  # what scipy would inflate, bounded first (a few KB can claim gigabytes)
        try:
            return loadmat(io.BytesIO(data), squeeze_me=True)
        except Exception as err:
            raise SuiteDataError(f"{path}: not a readable MAT-file ({str(err)[:120]})") from None

    meta = base / "devkit" / "cars_meta.mat"
    out = Found(base, [str(c) for c in np.atleast_1d(mat(meta)["class_names"]).tolist()], annotations=[meta])
    for split, annos, folder in (("train", base / "devkit" / "cars_train_annos.mat", "cars_train"),
                                 ("test", base / "cars_test_annos_withlabels.mat", "cars_test")):
        rows = np.atleast_1d(mat(annos).get("annotations"))
        if rows.dtype.names is None or not {"fname", "class"} <= set(rows.dtype.names):
            raise SuiteDataError(f"{annos}: expected a struct array 'annotations' with 'fname' and 'class'")
        setattr(out, split, Split([(_inside(base / folder, str(a["fname"]), annos),
                                    whole_number(a["class"], annos, "class") - 1) for a in rows]))
        out.annotations.append(annos)
    return out


def fgvc_aircraft(root: Path) -> Found:
    base = root / "fgvc-aircraft-2013b" / "data"
    variants = base / "variants.txt"
    out = Found(base.parent, _lines(variants), annotations=[variants])
    for split in ("train", "val", "test"):
        path = base / f"images_variant_{split}.txt"
        rows = [line.split(" ", 1) for line in _lines(path)]
        setattr(out, split, Split([(_inside(base / "images", f"{r[0]}.jpg", path), _index(out.classes, r[-1], path))
                                   for r in rows]))
        out.annotations.append(path)
    return out


def dtd(root: Path, partition: int = 1) -> Found:
    base = root / "dtd" / "dtd"
    rows = {split: _lines(base / "labels" / f"{split}{partition}.txt") for split in ("train", "val", "test")}
    classes = sorted({r.split("/")[0] for lines in rows.values() for r in lines})
    out = Found(base, classes, annotations=[base / "labels" / f"{s}{partition}.txt" for s in rows])
    for split, lines in rows.items():
        path = base / "labels" / f"{split}{partition}.txt"
        setattr(out, split, Split([(_inside(base / "images", r, path), _index(classes, r.split("/")[0], path))
                                   for r in lines]))
    return out


def oxford_pets(root: Path) -> Found:
    """trainval.txt / test.txt: ``<image> <class 1-37> <species> <breed>``; a class is named by its images'
    prefix (``Abyssinian``)."""
    base = root / "oxford-iiit-pet"
    parsed, names = {}, {}
    for split in ("trainval", "test"):
        path = base / "annotations" / f"{split}.txt"
        rows = []
        for line in _lines(path):
            fields = line.split()
            if line.startswith("#"):
                continue
            if len(fields) < 2:
                raise SuiteDataError(f"{path}: {line[:60]!r} is not '<image> <class> ...'")
            number = whole_number(fields[1], path, "class")
            rows.append((_inside(base / "images", f"{fields[0]}.jpg", path), number))
            names.setdefault(number, fields[0].rsplit("_", 1)[0])
        parsed[split] = rows
    ids = sorted(names)
    index = {c: i for i, c in enumerate(ids)}
    train, test = ([(p, index[c]) for p, c in parsed[s]] for s in ("trainval", "test"))
    return Found(base, [names[c] for c in ids], train=Split(train), test=Split(test),
                 annotations=[base / "annotations" / f"{s}.txt" for s in parsed])


def caltech101(root: Path) -> Found:
    """Every category folder of 101_ObjectCategories, BACKGROUND_Google included (Kornblith et al.'s 102 classes;
    torchvision's Caltech101 drops it), its images sorted; no split is shipped: the pool is drawn from."""
    base = root / "caltech101" / "101_ObjectCategories"
    classes = sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))
    user_files.all_within(base.parent, (base / c for c in classes), what="category folder", error=SuiteDataError)
    samples = [(str(f), i) for i, c in enumerate(classes) for f in sorted((base / c).iterdir())
               if f.suffix.lower() == ".jpg" and not f.name.startswith(".")]
    return Found(base.parent, classes, pool=Split(samples))


def flowers102(root: Path) -> Found:
    from moco_core.data.matfile import read_mat

    base = root / "flowers-102"
    files = [base / "imagelabels.mat", base / "setid.mat"]
    for path in files:  # regular files of a sane size before read_mat reads them whole
        user_files.read_bytes(path, limit=user_files.LIST_LIMIT, what="MAT-file", error=SuiteDataError)
    labels, ids = read_mat(files[0]).get("labels"), read_mat(files[1])
    if labels is None or not {"trnid", "valid", "tstid"} <= ids.keys():
        raise SuiteDataError(f"{base}: imagelabels.mat needs 'labels', setid.mat 'trnid', 'valid', 'tstid'")
    labels = np.asarray(labels).reshape(-1)
    if labels.size == 0 or not np.issubdtype(labels.dtype, np.number) or not np.isfinite(labels).all() \
            or (labels != np.round(labels)).any() or labels.min() < 1 or labels.max() > 1 << 20:
        raise SuiteDataError(f"{files[0]}: 'labels' must be class numbers from 1 (whole, finite, at most {1 << 20})")
    labels = labels.astype(np.int64)
    out = Found(base, [f"{c:03d}" for c in range(1, int(labels.max()) + 1)], annotations=files)
    for split, key in (("train", "trnid"), ("val", "valid"), ("test", "tstid")):
        numbers = [whole_number(i, files[1], key) for i in ids[key].reshape(-1)]
        if any(not 1 <= i <= len(labels) for i in numbers):
            raise SuiteDataError(f"{files[1]}: {key} names images beyond the {len(labels)} labelled")
        setattr(out, split, Split([(str(base / "jpg" / f"image_{i:05d}.jpg"), int(labels[i - 1]) - 1)
                                   for i in numbers]))
    return out


def voc2007(root: Path) -> Found:
    """Classification labels of ImageSets/Main/<class>_<split>.txt (``000005 -1``: 1 present, -1 absent, 0
    difficult, stored here as 1 / 0 / -1); the classes are those with a list file, sorted (VOC's 20)."""
    base = root / "VOCdevkit" / "VOC2007"
    main = base / "ImageSets" / "Main"
    classes = sorted(p.name[: -len("_train.txt")] for p in main.glob("*_train.txt"))
    if not classes:
        raise SuiteDataError(f"{main}: no <class>_train.txt lists (VOC 2007's classification labels)")
    out = Found(base, classes)
    code = {"1": 1, "-1": 0, "0": -1}
    for split in ("train", "val", "test"):
        ids = _lines(main / f"{split}.txt")
        labels = np.zeros((len(ids), len(classes)), dtype=np.int64)
        row = {i: n for n, i in enumerate(ids)}
        for c, name in enumerate(classes):
            path = main / f"{name}_{split}.txt"
            for line in _lines(path):
                image, _, value = line.partition(" ")
                if image not in row or value.strip() not in code:
                    raise SuiteDataError(f"{path}: {line[:60]!r} is not '<image id of {split}.txt> 1|-1|0'")
                labels[row[image], c] = code[value.strip()]
            out.annotations.append(path)
        setattr(out, split, Split([(_inside(base / "JPEGImages", f"{i}.jpg", main / f"{split}.txt"),
                                    tuple(int(v) for v in labels[n])) for n, i in enumerate(ids)]))
    return out


def cub200(root: Path) -> Found:
    base = root / "CUB_200_2011"
    tables = {}
    for name in ("images", "image_class_labels", "train_test_split", "classes"):
        tables[name] = _pairs(base / f"{name}.txt")
    def number(key: str, table: str) -> int:
        return whole_number(key, base / f"{table}.txt", "number")

    classes = [tables["classes"][k] for k in sorted(tables["classes"], key=lambda k: number(k, "classes"))]
    out = Found(base, classes, annotations=[base / f"{n}.txt" for n in tables])
    for split, flag in (("train", "1"), ("test", "0")):
        ids = [i for i in sorted(tables["images"], key=lambda k: number(k, "images"))
               if tables["train_test_split"].get(i) == flag]
        labels = tables["image_class_labels"]
        if any(i not in labels for i in ids):
            raise SuiteDataError(f"{base / 'image_class_labels.txt'}: an image of images.txt has no class number")
        setattr(out, split, Split([(_inside(base / "images", tables["images"][i], base / "images.txt"),
                                    number(labels[i], "image_class_labels") - 1) for i in ids]))
    return out
