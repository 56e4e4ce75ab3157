"""Semi-supervised subsets: class balance and determinism on hand-counted cases, SimCLR's file format, errors."""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from classification.subsets import file_subset, fraction_subset, parse_labels, per_class_count, select
from moco_core.config import ConfigError
from tests.layouts import WNIDS, imagenet_layout, simclr_subset_file


def _samples(sizes: list[int]) -> list[tuple[str, int]]:
    """Class c holds sizes[c] files /d/c<c>/<i>.JPEG, listed class by class."""
    return [(f"/d/c{c}/{i:03d}.JPEG", c) for c, n in enumerate(sizes) for i in range(n)]


@pytest.mark.parametrize("text, fraction", [("1%", 0.01), ("10%", 0.1), (" 10 % ", 0.1), ("12.5%", 0.125),
                                            ("100%", 1.0)])
def test_labels_are_a_percentage(text: str, fraction: float) -> None:
    assert parse_labels(text) == pytest.approx(fraction)


@pytest.mark.parametrize("text", ["0%", "101%", "10", "ten%", "-1%", "", "1e1%", "10%%"])
def test_other_labels_are_one_line_errors(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^data\.labels: .* in \(0, 100\]") as err:
        parse_labels(text)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("fraction, n, count", [
    (0.1, 250, 25),    # the embedded shapes: 250 a class
    (0.01, 1300, 13),  # an ImageNet class of 1,300
    (0.01, 732, 7),    # ImageNet's smallest class: 7.32
    (0.1, 15, 2),      # 1.5: halves round up
    (0.1, 14, 1),      # 1.4
    (0.1, 5, 1),       # 0.5 -> 1
    (0.01, 10, 1),     # 0.1 rounds to 0: at least one
    (1.0, 7, 7),
])
def test_per_class_count_by_hand(fraction: float, n: int, count: int) -> None:
    assert per_class_count(fraction, n) == count


def test_a_fraction_keeps_that_many_of_each_class() -> None:
    samples = _samples([10, 15, 3, 1])
    assert Counter(c for _, c in fraction_subset(samples, "10%", 0).samples) == {0: 1, 1: 2, 2: 1, 3: 1}
    assert Counter(c for _, c in fraction_subset(samples, "50%", 0).samples) == {0: 5, 1: 8, 2: 2, 3: 1}
    kept = fraction_subset(samples, "50%", 0)
    assert kept.record == {"kind": "labels", "labels": "50%", "seed": 0, "images": 16, "of": 29}
    assert kept.samples == [s for s in samples if s in kept.samples]  # the split's order is kept


def test_the_draw_is_a_function_of_the_files_and_the_seed() -> None:
    """The same images whatever order the scan listed them in (every process, every run); another seed draws
    others; the draw is the documented one: class c's files sorted, k of them chosen by default_rng([seed, c])."""
    samples = _samples([100, 40])
    first = fraction_subset(samples, "10%", 3).samples
    shuffled = samples[:]
    random.Random(0).shuffle(shuffled)
    assert sorted(fraction_subset(shuffled, "10%", 3).samples) == sorted(first)
    assert fraction_subset(samples, "10%", 3).samples == first
    assert sorted(fraction_subset(samples, "10%", 4).samples) != sorted(first)
    expected = set()
    for c, n in ((0, 100), (1, 40)):
        paths = sorted(p for p, label in samples if label == c)
        expected |= {paths[i] for i in np.random.default_rng([3, c]).choice(n, round(n / 10), replace=False)}
    assert {p for p, _ in first} == expected


def test_a_simclr_file_picks_its_images_by_name(tmp_path: Path) -> None:
    """SimCLR's format: one <wnid>_<n>.JPEG a line, classes mixed; a repeated line counts once, blank lines and
    spaces do not count; the record names the file by its SHA-256."""
    root = imagenet_layout(tmp_path / "imagenet")
    samples = [(str(p), WNIDS.index(p.parent.name)) for p in sorted((root / "train").glob("*/*.JPEG"))]
    names = [f"{WNIDS[2]}_3.JPEG", f"{WNIDS[0]}_0.JPEG", f"{WNIDS[3]}_1.JPEG", f"{WNIDS[0]}_0.JPEG"]
    path = simclr_subset_file(tmp_path / "1percent.txt", names)
    path.write_text(path.read_text() + "\n  \n")
    subset = file_subset(samples, path)
    assert [(Path(p).name, c) for p, c in subset.samples] == [(f"{WNIDS[0]}_0.JPEG", 0), (f"{WNIDS[2]}_3.JPEG", 2),
                                                               (f"{WNIDS[3]}_1.JPEG", 3)]
    assert subset.record == {"kind": "file", "file": "1percent.txt", "sha256": hashlib.sha256(
        path.read_bytes()).hexdigest(), "names": 3, "images": 3, "of": len(samples)}
    assert subset.warning is not None and "1 lines repeat an earlier name" in subset.warning


def test_names_not_among_the_train_images_stop_the_run(tmp_path: Path) -> None:
    samples = _samples([3, 3])
    path = simclr_subset_file(tmp_path / "10percent.txt", ["000.JPEG", "n09999999_1.JPEG", "n09999999_2.JPEG"])
    with pytest.raises(ConfigError) as err:
        file_subset([(p, c) for p, c in samples if "/c0/" in p], path)
    assert str(err.value).startswith("data.subset: 2 of the 3 names in ") and "first: 'n09999999_1.JPEG'" in str(
        err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="1 names in .* are files of several class folders .*'000.JPEG'"):
        file_subset(samples, simclr_subset_file(tmp_path / "a.txt", ["000.JPEG"]))  # in c0/ and c1/


def test_an_unreadable_listed_image_is_left_out_with_a_warning(tmp_path: Path) -> None:
    samples = _samples([3])
    path = simclr_subset_file(tmp_path / "s.txt", ["000.JPEG", "bad.JPEG"])
    subset = file_subset(samples, path, unreadable=["/d/c0/bad.JPEG"])
    assert [p for p, _ in subset.samples] == ["/d/c0/000.JPEG"]
    assert "1 listed images are unreadable and left out (first: 'bad.JPEG')" in (subset.warning or "")


@pytest.mark.parametrize("content, expected", [("", "names no image"), ("\n \n", "names no image"),
                                                (b"\xff\xfe\x00", "cannot be read")])
def test_an_empty_or_binary_file_is_a_one_line_error(tmp_path: Path, content: str | bytes, expected: str) -> None:
    path = tmp_path / "s.txt"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    with pytest.raises(ConfigError, match=expected):
        file_subset(_samples([2]), path)


def test_select_takes_one_or_none() -> None:
    samples = _samples([4])
    assert select(samples, labels=None, subset=None, seed=0) is None
    with pytest.raises(ConfigError, match="give one"):
        select(samples, labels="10%", subset="x.txt", seed=0)
