"""Issue 55, class 6: symbolic links that leave a dataset. Every reader, on its real-layout fixture: a file and a
folder linked out of the dataset's root are refused in one line naming the link, where it points and the root; a
link that stays inside is read; ``MOCO_FOLLOW_LINKS=1`` (moco_core.user_files.FOLLOW_LINKS) reads the outside one.
Before, every reader followed links wherever they pointed (the iNaturalist and Cityscapes cases were trained on,
a Caltech category linked to /etc became an empty class).
"""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from classification.layouts import find_listed
from classification.linear_transfer import readers
from classification.robustness import find_sets
from moco_core.data.data import scan_images
from moco_core.data.inat import inat_splits
from moco_core.data.shapes import CLASSES
from moco_core.errors import UserError
from moco_core.user_files import FOLLOW_LINKS
from tests import suite_layouts

WNIDS = ("n01440764", "n01443537", "n01484850", "n01491361")  # tests/layouts.py's classes (ImageNet-A: 2nd, 4th)


def _lazy(where: str) -> Callable[..., Any]:
    """``module:function``, imported when called: tests/moco_core collects without the transfer extras
    (tests/test_layers.py), and tests/layouts.py imports the transfer package."""
    module, name = where.split(":")
    return lambda *args, **kwargs: getattr(importlib.import_module(module), name)(*args, **kwargs)


def _detection(task: str) -> Callable[[Path], Any]:
    def read(base: Path) -> Any:
        config = _lazy("transfer.detection.config:load_transfer_config")(task, f"{task}_embedded", [],
                                                                {"data": {"path": str(base)}})
        return _lazy("transfer.detection.datasets:load_data")(config)
    return read


def _semseg(train: str, test: str) -> Callable[[Path], Any]:
    return lambda base: _lazy("transfer.segmentation.datasets:load_data")(str(base), train, test)


@dataclass(frozen=True)
class Case:
    """A reader on its fixture: ``build(base)`` writes the layout under ``base``; ``read(base)`` reads it; ``root``
    (under ``base``) is the dataset's root the links are judged against; ``file`` and ``folder`` are glob patterns
    under it (the first match is linked out; no folder where the layout has none below its root)."""

    build: Callable[[Path], Any]
    read: Callable[[Path], Any]
    root: str
    file: str
    folder: str | None


LAYOUTS, EMBEDDED, SEGMENTATION = "tests.layouts:", "transfer.embedded:", "tests.transfer.segmentation.layouts:"
CASES = {
    "image folder (pretrain, linear, kNN, fine-tune)": Case(
        lambda b: _lazy(LAYOUTS + "imagenet_layout")(b / "data", 2, 1), lambda b: scan_images(b / "data"), "data",
        "train/*/*_0.JPEG", "train/n01443537"),
    "iNaturalist 2018": Case(
        lambda b: _lazy(LAYOUTS + "inat_layout")(b / "inat", 2, 1), lambda b: inat_splits(b / "inat"), "inat",
        "train_val2018/*/*/*.jpg", "train_val2018"),
    "Flowers-102 folder (eval linear)": Case(
        _lazy(LAYOUTS + "flowers_layout"), find_listed, "flowers-102", "jpg/image_00001.jpg", "jpg"),
    "Pets folder (eval linear)": Case(
        _lazy(LAYOUTS + "pets_layout"), find_listed, "oxford-iiit-pet", "images/*_1.jpg", "images"),
    "suite Caltech-101": Case(suite_layouts.caltech101, lambda b: readers.confined(readers.caltech101(b)),
                              "caltech101", "101_ObjectCategories/*/*.jpg", "101_ObjectCategories/*"),
    "suite Flowers-102": Case(suite_layouts.flowers, lambda b: readers.confined(readers.flowers102(b)),
                              "flowers-102", "jpg/image_00001.jpg", "jpg"),
    "suite Pets": Case(suite_layouts.pets, lambda b: readers.confined(readers.oxford_pets(b)), "oxford-iiit-pet",
                       "images/*_1.jpg", "images"),
    "suite DTD": Case(suite_layouts.dtd, lambda b: readers.confined(readers.dtd(b)), "dtd/dtd", "images/*/*.jpg",
                      "images/*"),
    "suite CIFAR-10 batches": Case(suite_layouts.cifar10, lambda b: readers.confined(readers.cifar10(b)),
                                   "cifar-10-batches-py", "data_batch_1", None),
    "robustness ImageNet-A": Case(
        lambda b: _lazy(LAYOUTS + "robustness_layout")(b / "rob", b / "none"),
        lambda b: find_sets(b / "rob", ("imagenet-a",), list(WNIDS), []), "rob/imagenet-a", "n*/*.jpg", "n*"),
    "VOC detection": Case(
        lambda b: _lazy(EMBEDDED + "ensure_voc")(b, trainval=4, test=2, size=64),
        lambda b: _lazy("transfer.detection.voc:load_voc")(b / "VOC2007", "trainval", CLASSES), "VOC2007",
        "JPEGImages/*.jpg", "Annotations"),
    "COCO images": Case(
        lambda b: _lazy(EMBEDDED + "ensure_coco")(b, train=4, val=2, size=64),
        lambda b: _lazy("transfer.detection.coco:load_coco")(b / "coco" / "annotations" / "instances_train2017.json",
                                                             b / "coco" / "train2017"),
        "coco/train2017", "*.jpg", None),
    "COCO annotations (eval coco)": Case(
        lambda b: _lazy(EMBEDDED + "ensure_coco")(b, train=4, val=2, size=64), _detection("coco"), "coco",
        "annotations/instances_train2017.json", "annotations"),
    "LVIS annotations (eval lvis)": Case(
        lambda b: _lazy("transfer.detection.lvis:ensure_lvis")(b, train=4, val=2, size=64), _detection("lvis"),
        "lvis", "lvis_v0.5_train.json", None),
    "Cityscapes instances (eval cityscapes)": Case(
        lambda b: _lazy("transfer.detection.cityscapes:ensure_cityscapes")(b, train=4, val=2, size=64),
        _detection("cityscapes"), "cityscapes/leftImg8bit/train", "*/*_leftImg8bit.png", "*"),
    "VOC semantic segmentation": Case(
        _lazy(SEGMENTATION + "voc_segmentation_layout"), _semseg("voc_2012_sem_seg_train_aug", "voc_2012_sem_seg_val"),
        "VOC2012", "JPEGImages/*.jpg", "SegmentationClassAug"),
    "Cityscapes semantic segmentation": Case(
        _lazy(SEGMENTATION + "cityscapes_layout"),
        _semseg("cityscapes_fine_sem_seg_train", "cityscapes_fine_sem_seg_val"), "cityscapes/gtFine/train",
        "*/*_labelTrainIds.png", "*"),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, Path], Path]:
    """Each case's layout written once; ``copy(name, where)`` gives a fresh copy of it (links kept as links)."""
    made: dict[str, Path] = {}

    def copy(name: str, where: Path) -> Path:
        if name not in made:
            made[name] = tmp_path_factory.mktemp("layout")
            CASES[name].build(made[name])
        shutil.copytree(made[name], where, symlinks=True)
        return where
    return copy


def _first(root: Path, pattern: str) -> Path:
    found = sorted(p for p in root.glob(pattern) if not p.name.startswith("."))
    assert found, f"no {pattern} under {root}"
    return found[0]


def _move_and_link(path: Path, to: Path) -> Path:
    """``path`` moved to ``to``, and a link to it left in its place; returns the link's target's real path."""
    to.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(path, to)
    path.symlink_to(to)
    return to.resolve()


def _kinds(name: str) -> list[str]:
    return ["file", "folder"] if CASES[name].folder else ["file"]


OUT = [(name, kind) for name in CASES for kind in _kinds(name)]


def _linked(name: str, kind: str, built: Callable[[str, Path], Path], tmp_path: Path,
            to: Callable[[Path, Path], Path]) -> tuple[Path, Path, Path, Path]:
    """A copy of case ``name`` whose first file (or folder) is moved to ``to(root, found)`` and linked from its
    place: (the dataset, its root, the link, the link's target's real path)."""
    base = built(name, tmp_path / "base")
    root = base / CASES[name].root
    link = _first(root, CASES[name].file if kind == "file" else str(CASES[name].folder))
    return base, root, link, _move_and_link(link, to(root, link))


@pytest.mark.parametrize(("name", "kind"), OUT, ids=[f"{n}: {k}" for n, k in OUT])
def test_a_link_out_of_the_dataset_is_refused_in_one_line(name: str, kind: str, built: Callable[[str, Path], Path],
                                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails on the old code: every reader read the file or folder wherever the link pointed."""
    monkeypatch.delenv(FOLLOW_LINKS, raising=False)
    base, root, link, target = _linked(name, kind, built, tmp_path, lambda _, link: tmp_path / "outside" / link.name)
    with pytest.raises(UserError) as refused:
        CASES[name].read(base)
    message = str(refused.value)
    assert "\n" not in message
    assert f"{link} is a link to {target}, outside the dataset's root {root}: not read" in message, message
    assert f"{FOLLOW_LINKS}=1" in message


@pytest.mark.parametrize(("name", "kind"), OUT, ids=[f"{n}: {k}" for n, k in OUT])
def test_a_link_inside_the_dataset_is_read(name: str, kind: str, built: Callable[[str, Path], Path],
                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FOLLOW_LINKS, raising=False)
    # moved to a hidden folder, and named as no reader lists
    base, *_ = _linked(name, kind, built, tmp_path, lambda root, link: root / ".moved" / f"{link.name}.kept")
    assert CASES[name].read(base)


@pytest.mark.parametrize(("name", "kind"), OUT, ids=[f"{n}: {k}" for n, k in OUT])
def test_follow_links_reads_the_link_out(name: str, kind: str, built: Callable[[str, Path], Path],
                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FOLLOW_LINKS, "1")
    base, *_ = _linked(name, kind, built, tmp_path, lambda _, link: tmp_path / "outside" / link.name)
    assert CASES[name].read(base)


def test_the_caltech_category_linked_to_etc_is_refused_not_an_empty_class(tmp_path: Path) -> None:
    """The issue's case: ``101_ObjectCategories/<category> -> /etc`` was a class without images."""
    suite_layouts.caltech101(tmp_path)
    category = _first(tmp_path / "caltech101" / "101_ObjectCategories", "*")
    shutil.rmtree(category)
    category.symlink_to("/etc")
    with pytest.raises(readers.SuiteDataError, match=f"category folder {category} is a link to /etc, outside"):
        readers.caltech101(tmp_path)


def test_image_folders_resolve_only_the_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cost bound: scanning an image folder asks ``realpath`` of the root, the split folder and each link,
    never of each file (1.28M on ImageNet)."""
    import os

    _lazy(LAYOUTS + "imagenet_layout")(tmp_path / "data", 3, 1)
    inside = tmp_path / "data" / "train" / WNIDS[1] / "linked.JPEG"
    inside.symlink_to(_first(tmp_path / "data" / "train" / WNIDS[0], "*_0.JPEG"))
    calls: list[str] = []
    real = os.path.realpath
    monkeypatch.setattr(os.path, "realpath", lambda p, *a, **k: calls.append(str(p)) or real(p, *a, **k))
    found = scan_images(tmp_path / "data", verify=False)
    assert str(inside) in [p for p, _ in found.samples]
    assert len(calls) <= 4, calls  # root twice (the folder check, the link's), train/, the link


@pytest.mark.parametrize("opt_in", [False, True])
def test_the_cli_refuses_a_link_out_in_one_line_and_follows_it_when_asked(
        opt_in: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through ``moco eval knn`` on an ImageNet-layout folder whose class folder is a link out of it."""
    if opt_in:
        monkeypatch.setenv(FOLLOW_LINKS, "1")
    else:
        monkeypatch.delenv(FOLLOW_LINKS, raising=False)
    root = _lazy(LAYOUTS + "imagenet_layout")(tmp_path / "data", 2, 1)
    target = _move_and_link(root / "val" / WNIDS[2], tmp_path / "outside" / WNIDS[2])
    from typer.testing import CliRunner

    from cli import app

    result = CliRunner().invoke(app, ["eval", "knn", "random", "--arch", "resnet18", "-c", "knn_32px", "--data",
                                 str(root), "--output-dir", str(tmp_path / "out")])
    if opt_in:
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert f"{root / 'val' / WNIDS[2]} is a link to {target}, outside the dataset's root {root}" in lines[0]


def test_a_link_out_that_no_reader_opens_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what is read is judged: a stray README linked out of a class folder is no image and stops nothing."""
    monkeypatch.delenv(FOLLOW_LINKS, raising=False)
    root = _lazy(LAYOUTS + "imagenet_layout")(tmp_path / "data", 2, 1)
    (tmp_path / "notes.txt").write_text("elsewhere\n")
    (root / "train" / WNIDS[0] / "README").symlink_to(tmp_path / "notes.txt")
    (root / "train" / "LICENSE").symlink_to(tmp_path / "notes.txt")
    assert len(scan_images(root, verify=False).classes) == len(WNIDS)
