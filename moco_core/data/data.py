"""Image-folder datasets: scan an ImageFolder tree (or a flat folder of images), skip unreadable files.

Whether a file is taken, and how it is decoded, is ``moco_core.data.image_files``'s, shared with the tensor pipeline:
a file that does not decode is reported, and :class:`ImageDataset` substitutes another image.
"""

from __future__ import annotations

import contextlib
import json
import logging
import operator
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.utils.data
from PIL import Image

from moco_core import distributed, smoke
from moco_core.data.image_files import check_image, load_rgb, reason
from moco_core.errors import UserError, show
from moco_core.user_files import parse_json_lines, within

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

logger = logging.getLogger("moco.data")

_ANNOUNCE_VERIFY = 100_000  # image files: a header check this long is announced
_VERIFY_CHUNK = 1024  # files checked per thread task (keeps the number of futures small on big trees)
_warned_paths: set[str] = set()  # files already reported as undecodable by this process


class DatasetError(UserError):
    """A dataset directory is missing, not a directory, empty, or holds no readable image."""


@dataclass(frozen=True)
class ImageList:
    """What :func:`scan_images` found: ``(path, label)`` samples, class names, skipped ``(path, reason)``, and the
    links not followed because their directory was already read (``(link, directory)``)."""

    samples: list[tuple[str, int]]
    classes: list[str]
    skipped: list[tuple[str, str]]
    revisited: list[tuple[str, str]] = field(default_factory=list)


def is_image_file(name: str) -> bool:
    """True when ``name`` has an image extension (case-insensitive) and is not hidden."""
    return not name.startswith(".") and name.lower().endswith(IMAGE_EXTENSIONS)


def _directory_key(path: str) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino


def _images_under(directory: str, seen: set[tuple[int, int]], revisited: list[tuple[str, str]],
                  root: Path) -> list[str]:
    """All image files below ``directory`` (recursive, hidden entries skipped), sorted by path.

    Symbolic links are followed while they stay inside ``root`` (:func:`moco_core.user_files.within`, asked only
    of the entries a listing says are links: ImageNet's 1.28M files cost no ``realpath``), and every real
    directory is read once (``seen`` holds them, shared across the scan): a link back up the tree
    (``ln -s . loop``) is recorded in ``revisited`` instead of repeating the dataset, or of never ending.
    """
    found: list[str] = []
    folders = [directory]
    while folders:
        try:
            with os.scandir(folders.pop()) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:  # unreadable: as os.walk, nothing found there
            continue
        below = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            folder = _is_dir(entry)
            if entry.is_symlink() and (folder or is_image_file(entry.name)):  # what is read, never a stray link
                within(root, entry.path, what="dataset entry", error=DatasetError)
            if not folder:
                if is_image_file(entry.name):
                    found.append(entry.path)
                continue
            try:
                key = _directory_key(entry.path)
            except OSError:  # a dangling link
                continue
            if key in seen:
                revisited.append((entry.path, os.path.realpath(entry.path)))
            else:
                seen.add(key)
                below.append(entry.path)
        folders += reversed(below)  # depth first in name order, as os.walk: which of two ways in is read is kept
    return sorted(found)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _collect(base: Path, root: Path) -> tuple[list[tuple[str, int]], list[str], list[tuple[str, str]]]:
    """Samples and classes of ``base``: class subfolders if any hold images, else its own image files; and the
    links to directories already read. Links leaving ``root`` are refused (:func:`_images_under`)."""
    within(root, base, what="dataset folder", error=DatasetError)
    with os.scandir(base) as listing:
        entries = sorted((e for e in listing if not e.name.startswith(".")), key=lambda e: e.name)
    for entry in entries:
        if entry.is_symlink() and (_is_dir(entry) or is_image_file(entry.name)):
            within(root, entry.path, what="dataset entry", error=DatasetError)
    seen, revisited = {_directory_key(str(base))}, []
    folders = []  # the class folders, registered before any is read: a link into another class is not followed
    for entry in entries:
        if _is_dir(entry):
            key = _directory_key(entry.path)
            if key in seen:  # a class folder that is a link to the root or to another class
                revisited.append((entry.path, os.path.realpath(entry.path)))
                continue
            seen.add(key)
            folders.append(entry.name)
    per_class: list[tuple[str, list[str]]] = []
    for name in folders:
        files = _images_under(str(base / name), seen, revisited, root)
        if files:
            per_class.append((name, files))
    if per_class:
        classes = [name for name, _ in per_class]
        samples = [(f, label) for label, (_, files) in enumerate(per_class) for f in files]
        return samples, classes, revisited
    flat = [str(base / e.name) for e in entries if is_image_file(e.name) and e.is_file()]
    return [(f, -1) for f in flat], [], revisited


def show_value(value: object, limit: int = 60) -> str:
    """A value for a one-line error message: repr'd (so newlines stay escaped), cut to ``limit`` characters."""
    return show(value, limit)


def _one_line(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_chunk(paths: Sequence[str]) -> list[str | None]:
    return [check_image(p) for p in paths]


def _verify(
    samples: list[tuple[str, int]], workers: int, *, shared: bool = False
) -> tuple[list[tuple[str, int]], list[tuple[str, str]]]:
    """Split samples into readable ones and skipped ``(path, reason)``, preserving order.

    ``shared``: every process of the run calls this with the same samples; each checks its share (every
    world-th file) and all learn the others' results, so each keeps the same list (the sampler indexes it) at
    1/world of the file reads.
    """
    rank, world = (distributed.rank(), distributed.world_size()) if shared else (0, 1)
    paths = [p for p, _ in samples][rank::world]
    if workers <= 1 or len(paths) < 64:
        results = _check_chunk(paths)
    else:
        # Several chunks per thread so the work evenly spreads; capped so huge trees make few futures.
        size = min(_VERIFY_CHUNK, max(1, len(paths) // (workers * 4)))
        chunks = [paths[i : i + size] for i in range(0, len(paths), size)]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = [r for chunk_result in pool.map(_check_chunk, chunks) for r in chunk_result]
    failed = [(i * world + rank, reason) for i, reason in enumerate(results) if reason is not None]
    if world > 1:
        failed = sorted(f for part in distributed.all_gather_objects(failed) for f in part)
    reasons = dict(failed)
    kept = [sample for i, sample in enumerate(samples) if i not in reasons]
    return kept, [(samples[i][0], reason) for i, reason in failed]


def verify_samples(samples: list[tuple[str, int]], workers: int, *,
                   shared: bool = False) -> tuple[list[tuple[str, int]], list[tuple[str, str]]]:
    """:func:`scan_images`'s header check for samples listed elsewhere (a dataset's annotation files): (readable
    samples in order, skipped ``(path, reason)``); a missing file is skipped with its reason."""
    return _verify(samples, workers, shared=shared)


def _nested_dataset(root: Path, depth: int = 3, fan_out: int = 8) -> Path | None:
    """The one folder up to ``depth`` levels below ``root`` with train/ and val/ folders and images in train/
    (ImageNet as Kaggle ships it: ILSVRC/Data/CLS-LOC/), or None. Only folders of at most ``fan_out``
    subfolders are opened, so a dataset's class folders are never listed."""
    level, found = [root], []
    for _ in range(depth):
        below = []
        for folder in level:
            subfolders = _subfolders(folder)
            if len(subfolders) > fan_out:
                continue
            for sub in subfolders:
                if (sub / "val").is_dir() and _holds_images(sub / "train"):
                    found.append(sub)
                else:
                    below.append(sub)
        level = below
    return found[0] if len(found) == 1 else None


def _subfolders(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as entries:
            return sorted(Path(e.path) for e in entries if not e.name.startswith(".") and e.is_dir())
    except OSError:
        return []


def _holds_images(folder: Path) -> bool:
    """Whether ``folder`` or one of its first three subfolders holds an image file (a quick look)."""
    for where in [folder, *_subfolders(folder)[:3]]:
        try:
            with os.scandir(where) as entries:
                if any(is_image_file(e.name) for e in entries):
                    return True
        except OSError:
            continue
    return False


def scan_images(
    root: str | Path, *, split: str = "train", verify: bool = True, workers: int = 8, shared: bool = False
) -> ImageList:
    """Find the images of an ImageFolder root (``root/split`` when present, else ``root`` itself).

    Class subfolders give labels 0..C-1 in sorted order; a flat folder of images gives label -1.
    With ``verify`` every file's header is opened and unreadable files go to ``skipped``; ``shared``: every
    process of the run scans the same root, and each opens 1/world of the files (a collective: all must call).
    """
    root = Path(root)
    if not root.exists():
        raise DatasetError(f"dataset directory not found: {root}")
    if not root.is_dir():
        raise DatasetError(f"dataset path is not a directory: {root}")
    base = root / split if split and (root / split).is_dir() else root
    nested = _nested_dataset(root) if split and base == root else None
    if nested is not None:  # root would be read as one class folder holding train/, val/ (and test/) alike
        raise DatasetError(f"{root} has no {split}/ folder; read as a folder of images it would give every image "
                           f"below it, those of {nested}/val/ too: pass --data {nested}")
    samples, classes, revisited = _collect(base, root)
    if not samples:
        raise DatasetError(
            f"no images found under {base} (expected ImageFolder layout: "
            f"{root}/{split or 'train'}/<class>/*.jpg or a folder of images)"
        )
    kept = smoke.bounded(samples)  # MOCO_SMOKE=1: seconds, whatever the folder's size
    if len(kept) < len(samples) and distributed.is_main():
        print(f"note: {len(kept)} of the {len(samples):,} images under {base}, evenly spaced (MOCO_SMOKE=1 reads at "
              f"most {smoke.FOLDER_IMAGES} a folder)", file=sys.stderr, flush=True)
    samples = kept
    skipped: list[tuple[str, str]] = []
    if verify:
        announce = len(samples) >= _ANNOUNCE_VERIFY and distributed.is_main()
        if announce:  # minutes on a network file system: say what the wait is
            world = f" over {distributed.world_size()} processes" if shared and distributed.world_size() > 1 else ""
            print(f"checking that {len(samples):,} image files open{world}...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        samples, skipped = _verify(samples, workers, shared=shared)
        if announce:
            print(f"checked in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        if not samples:
            raise DatasetError(f"none of the {len(skipped)} image files under {base} could be read")
    return ImageList(samples=samples, classes=classes, skipped=skipped, revisited=revisited)


def val_split(root: Path) -> str:
    """"val", or "test" where an ImageFolder root has ``test/`` and no ``val/`` (CIFAR exported to folders)."""
    return "test" if not (root / "val").is_dir() and (root / "test").is_dir() else "val"


def unlabelled_splits(root: Path, train: ImageList, val: ImageList) -> str | None:
    """Why ``root``'s train/ and val/ do not make labelled splits (the same class folders in both), or None."""
    if not train.classes:
        return f"{root / 'train'} has no class folders; this evaluation needs labels (train/<class>/*.JPEG)"
    if not val.classes:
        return (f"{root / 'val'} holds its images directly, not in class folders (ImageNet's validation archive "
                f"unpacks that way): move each into val/<class>/, named as in train/ (the ILSVRC2012 devkit's "
                f"ground truth, or Kaggle's LOC_val_solution.csv, gives each image's class)")
    if train.classes != val.classes:
        only_train = sorted(set(train.classes) - set(val.classes))
        only_val = sorted(set(val.classes) - set(train.classes))
        example = (f"{_one_line(only_train[0], 80)} only in train/" if only_train else
                   f"{_one_line(only_val[0], 80)} only in val/")
        return (f"train/ and val/ have different class folders ({len(train.classes)} vs {len(val.classes)}; "
                f"{example}{', and others' if len(only_train) + len(only_val) > 1 else ''})")
    return None


def warn_revisited(revisited: Sequence[tuple[str, str]], *, limit: int = 3) -> str | None:
    """One line naming the links not followed (their directory was already read), or None."""
    if not revisited:
        return None
    shown = ", ".join(f"{_one_line(link, 80)} -> {_one_line(real, 80)}" for link, real in revisited[:limit])
    more = f" and {len(revisited) - limit} more" if len(revisited) > limit else ""
    return (f"followed symbolic links, reading each directory once: {len(revisited)} links to a directory already "
            f"read were not followed again ({shown}{more})")


def warn_skipped(skipped: Sequence[tuple[str, str]], *, limit: int = 5) -> str | None:
    """One line naming up to ``limit`` skipped files and their reasons, or None when none were skipped."""
    if not skipped:
        return None
    count = len(skipped)
    shown = [f"{_one_line(os.path.basename(p), 80)} ({_one_line(r)})" for p, r in skipped[: max(limit, 0)]]
    noun = "image" if count == 1 else "images"
    line = f"skipped {count} unreadable {noun}: " + ", ".join(shown)
    if count > len(shown):
        line += f"{', ' if shown else ''}and {count - len(shown)} more"
    return line


def report_undecodable(path: str, instead: str, reason: str | None = None) -> None:
    """Warn once per process that ``path`` does not decode and what stands in for it."""
    if path in _warned_paths:
        return
    _warned_paths.add(path)
    detail = f" ({_one_line(reason)})" if reason else ""
    logger.warning("cannot decode %s%s; using %s instead", path, detail, instead)


class DecodeFailures:
    """The images that did not decode, noted by whichever process loads them (DataLoader workers included) in one
    file, so that the main process reports them once per epoch: each file once, with how often it was met.

    Notes are whole lines appended with O_APPEND; :meth:`report` moves the file aside before reading it.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def note(self, path: str, reason: str) -> None:
        line = json.dumps([path, _one_line(reason)]) + "\n"
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError:  # the run directory is gone or full: say it here rather than not at all
            report_undecodable(path, "the next image", reason)

    def report(self, when: str, *, limit: int = 5) -> str | None:
        """One line on the images noted since the last report (``when``: "epoch 3"), or None; forgets them."""
        taken = self.path.with_name(f"{self.path.name}.{os.getpid()}")
        try:
            os.replace(self.path, taken)
        except FileNotFoundError:
            return None
        try:
            counts: dict[tuple[str, str], int] = {}
            notes, _ = parse_json_lines(taken.read_bytes())  # whole lines of ours; a torn one is left out
            for note in notes:
                with contextlib.suppress(ValueError, TypeError):
                    path, reason = note
                    counts[(str(path), str(reason))] = counts.get((str(path), str(reason)), 0) + 1
        finally:
            taken.unlink(missing_ok=True)
        if not counts:
            return None
        shown = [f"{_one_line(os.path.basename(p), 80)} ({r}) x{n}" for (p, r), n in list(counts.items())[:limit]]
        more = f" and {len(counts) - limit} more" if len(counts) > limit else ""
        noun = "image" if len(counts) == 1 else "images"
        return (f"{when}: {len(counts)} {noun} passed the header check but did not decode; the next image stood in "
                f"each time: {', '.join(shown)}{more}")


class ImageDataset(torch.utils.data.Dataset):
    """``(transform(image), label, index)`` items; an image that fails to decode is replaced by the next.

    With ``failures`` each failure is noted there (the run reports them once per epoch); without, each file is
    logged once per process.
    """

    def __init__(self, samples: list[tuple[str, int]], transform: Callable[[Image.Image], Any],
                 failures: DecodeFailures | None = None) -> None:
        self.samples = list(samples)
        self.transform = transform
        self.failures = failures
        self._bad: dict[int, str] = {}  # positions known not to decode (per process), and why

    def __len__(self) -> int:
        return len(self.samples)

    def _load(self, position: int) -> Image.Image | None:
        """The decoded image at ``position``, or None (with one warning per file) when it fails."""
        path = self.samples[position][0]
        try:
            return load_rgb(path)
        except Exception as err:  # a corrupt file can fail in many ways
            self._bad[position] = reason(err)
            self._failed(position)
            return None

    def _failed(self, position: int) -> None:
        path = self.samples[position][0]
        if self.failures is not None:
            self.failures.note(path, self._bad[position])
        else:
            report_undecodable(path, "the next image", self._bad[position])

    def __getitem__(self, index: int) -> tuple[Any, int, int]:
        i = operator.index(index)
        n = len(self.samples)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for a dataset of {n} images")
        for step in range(n):
            position = (i + step) % n
            if position in self._bad:
                if self.failures is not None:  # met again: counted again
                    self._failed(position)
                continue
            img = self._load(position)
            if img is not None:
                return self.transform(img), self.samples[position][1], i
        raise DatasetError(f"none of the {n} images in the dataset could be decoded")
