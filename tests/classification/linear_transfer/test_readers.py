"""classification/linear_transfer/readers.py on each layout's fixture (tests/suite_layouts.py): the files, labels
and order that torchvision's own dataset class reads from the same folder (the oracle: the fixtures are the layouts it
reads,
down to the file names), and what the reader refuses."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torchvision.datasets as tvd

from classification.linear_transfer import readers
from classification.linear_transfer.catalog import BY_NAME, SPECS, missing_line
from classification.linear_transfer.readers import SuiteDataError
from tests import suite_layouts


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return suite_layouts.transfer_suite_layout(tmp_path_factory.mktemp("suite"))


def _pairs(split: readers.Split) -> list[tuple[str, object]]:
    return [(str(p), label) for p, label in split.samples]


def _tv(files: list, labels: list) -> list[tuple[str, object]]:
    return [(str(f), int(label)) for f, label in zip(files, labels, strict=True)]


def test_every_spec_finds_its_fixture_by_its_marker(root: Path) -> None:
    assert [s.name for s in SPECS] == ["food101", "cifar10", "cifar100", "cub200", "sun397", "cars", "aircraft",
                                       "dtd", "pets", "caltech101", "flowers", "voc2007"]
    for spec in SPECS:
        assert (root / spec.marker).exists(), spec.name
        assert missing_line(spec, root / "nowhere").startswith(f"{spec.name}: not found under {root / 'nowhere'} "
                                                               f"(expected {root / 'nowhere'}/")


@pytest.mark.parametrize("split", ["train", "test"])
def test_food101_is_torchvisions(root: Path, split: str) -> None:
    ours = readers.food101(root)
    theirs = tvd.Food101(root, split=split, download=False)
    assert ours.classes == theirs.classes
    assert _pairs(getattr(ours, split)) == _tv(theirs._image_files, theirs._labels)


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_is_torchvisions_without_pickle_load(root: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cls = {"cifar10": tvd.CIFAR10, "cifar100": tvd.CIFAR100}[name]
    monkeypatch.setattr(cls, "_check_integrity", lambda self: True)  # the fixture's batches have other MD5s
    monkeypatch.setattr(tvd.cifar, "check_integrity", lambda path, md5=None: True)
    ours = getattr(readers, name)(root)
    assert ours.classes == cls(root, train=True, download=False).classes
    for split, train in (("train", True), ("test", False)):
        theirs = cls(root, train=train, download=False)
        part = getattr(ours, split)
        assert part.arrays.shape == theirs.data.shape and (part.arrays == theirs.data).all()
        assert [label for _, label in part.samples] == list(theirs.targets)


def test_a_hostile_cifar_batch_is_refused(root: Path, tmp_path: Path) -> None:
    import shutil

    shutil.copytree(root / "cifar-10-batches-py", tmp_path / "cifar-10-batches-py")

    class Boom:
        def __reduce__(self) -> tuple:
            return (print, ("pwned",))
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(pickle.dumps({"data": Boom()}, protocol=2))
    with pytest.raises(SuiteDataError, match=r"refused: loading it would call (__builtin__|builtins)\.print"):
        readers.cifar10(tmp_path)


def test_sun397_pool_is_torchvisions_and_partitions_give_split_1(root: Path, tmp_path: Path) -> None:
    ours = readers.sun397(root)
    theirs = tvd.SUN397(root, download=False)
    assert ours.classes == theirs.classes and ours.train is None and ours.test is None
    assert sorted(_pairs(ours.pool)) == sorted(_tv(theirs._image_files, theirs._labels))
    suite_layouts.sun397(tmp_path, partitions=True)
    split1 = readers.sun397(tmp_path)
    assert split1.pool is None and len(split1.train) == 6 and len(split1.test) == 3
    assert sorted(_pairs(split1.train) + _pairs(split1.test)) == sorted(
        (str(Path(str(p)).as_posix()).replace(str(root), str(tmp_path)), label) for p, label in _pairs(ours.pool))


@pytest.mark.parametrize("split", ["train", "test"])
def test_stanford_cars_is_torchvisions(root: Path, split: str) -> None:
    pytest.importorskip("scipy")
    ours = readers.stanford_cars(root)
    theirs = tvd.StanfordCars(root, split=split, download=False)
    assert ours.classes == theirs.classes
    assert _pairs(getattr(ours, split)) == [(str(p), int(c)) for p, c in theirs._samples]


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_aircraft_is_torchvisions(root: Path, split: str) -> None:
    ours = readers.fgvc_aircraft(root)
    theirs = tvd.FGVCAircraft(root, split=split, download=False)
    assert ours.classes == theirs.classes and "Cessna 172" in ours.classes
    assert _pairs(getattr(ours, split)) == _tv(theirs._image_files, theirs._labels)


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_dtd_partition_1_is_torchvisions(root: Path, split: str) -> None:
    ours = readers.dtd(root)
    theirs = tvd.DTD(root, split=split, partition=1, download=False)
    assert ours.classes == theirs.classes
    assert _pairs(getattr(ours, split)) == _tv(theirs._image_files, theirs._labels)


@pytest.mark.parametrize("split", ["trainval", "test"])
def test_pets_is_torchvisions(root: Path, split: str) -> None:
    ours = readers.oxford_pets(root)
    theirs = tvd.OxfordIIITPet(root, split=split, download=False)
    assert _pairs(ours.train if split == "trainval" else ours.test) == _tv(theirs._images, theirs._labels)


def test_caltech101_is_torchvisions_with_the_background_class(root: Path) -> None:
    ours = readers.caltech101(root)
    theirs = tvd.Caltech101(root, download=False)
    assert ours.classes == ["BACKGROUND_Google", *theirs.categories]  # Kornblith et al.'s 102: background kept
    files = [(str(root / "caltech101" / "101_ObjectCategories" / theirs.categories[y] / f"image_{i:04d}.jpg"), y + 1)
             for i, y in zip(theirs.index, theirs.y, strict=True)]
    assert [s for s in _pairs(ours.pool) if s[1] != 0] == files
    assert sum(1 for _, label in ours.pool.samples if label == 0) == 3


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_flowers_is_torchvisions(root: Path, split: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("scipy")
    monkeypatch.setattr(tvd.Flowers102, "_check_integrity", lambda self: True)  # it checks the archive's MD5s
    ours = readers.flowers102(root)
    theirs = tvd.Flowers102(root, split=split, download=False)
    assert _pairs(getattr(ours, split)) == _tv(theirs._image_files, theirs._labels)


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_voc2007_images_are_torchvisions_and_labels_its_lists(root: Path, split: str) -> None:
    ours = readers.voc2007(root)
    theirs = tvd.VOCDetection(root, year="2007", image_set=split, download=False)
    assert [p for p, _ in _pairs(getattr(ours, split))] == list(theirs.images)
    assert ours.classes == list(suite_layouts.VOC)
    main = root / "VOCdevkit" / "VOC2007" / "ImageSets" / "Main"
    first = {line.split()[0]: int(line.split()[1]) for line in (main / f"aeroplane_{split}.txt").read_text().split(
        "\n") if line}
    assert [label[0] for _, label in getattr(ours, split).samples] == [
        {1: 1, -1: 0, 0: -1}[first[Path(p).stem]] for p in theirs.images]


def test_cub200_by_hand(root: Path) -> None:
    ours = readers.cub200(root)
    base = root / "CUB_200_2011" / "images"
    assert ours.classes == list(suite_layouts.CUB)
    assert _pairs(ours.train)[:2] == [(str(base / "001.Black_footed_Albatross/Black_Footed_Albatross_0009_34.jpg"), 0),
                                      (str(base / "001.Black_footed_Albatross/Black_Footed_Albatross_0010_35.jpg"), 0)]
    assert len(ours.train) == 6 and [label for _, label in ours.test.samples] == [0, 1]


@pytest.mark.parametrize("line", ["../../etc/passwd", "/etc/passwd"])
def test_names_that_leave_the_dataset_are_refused(root: Path, tmp_path: Path, line: str) -> None:
    suite_layouts.dtd(tmp_path)
    (tmp_path / "dtd" / "dtd" / "labels" / "train1.txt").write_text(f"{line}\n")
    with pytest.raises(SuiteDataError, match="leaves"):
        readers.dtd(tmp_path)


def test_a_list_file_that_is_a_directory_or_huge_is_one_line(tmp_path: Path) -> None:
    suite_layouts.fgvc_aircraft(tmp_path)
    data = tmp_path / "fgvc-aircraft-2013b" / "data"
    (data / "variants.txt").unlink()
    (data / "variants.txt").mkdir()
    with pytest.raises(SuiteDataError, match="is a directory"):
        readers.fgvc_aircraft(tmp_path)
    assert BY_NAME["aircraft"].metric == "mean_per_class"
