"""classification/robustness.py: each set's layout read from its fixture down to the file names, and the class maps
against hand-worked cases (V2's numeric folders, the 200-class restriction of A and R, ReaL's label lists)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from classification.robustness import (
    find_sets,
    read_real,
    real_accuracy,
    restricted_predictions,
    v2_samples,
    wnid_samples,
)
from moco_core.config import ConfigError
from tests.layouts import A_CLASSES, A_NAMES, R_CLASSES, R_NAMES, WNIDS, imagenet_layout, robustness_layout


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("robustness")
    imagenet = imagenet_layout(base / "imagenet", ilsvrc_val_names=True)
    return imagenet, robustness_layout(base / "sets", imagenet)


def _val_files(imagenet: Path) -> list[str]:
    """The val images in the order an ImageFolder scan lists them: by class folder, then by name."""
    return [str(p) for wnid in WNIDS for p in sorted((imagenet / "val" / wnid).iterdir())]


def test_every_set_is_read_from_its_released_layout(layout: tuple[Path, Path]) -> None:
    imagenet, root = layout
    sets, real, missing = find_sets(root, ("imagenet-v2", "imagenet-a", "imagenet-r", "imagenet-sketch",
                                           "imagenet-real"), list(WNIDS), _val_files(imagenet))
    assert missing == []
    by_name = {s.name: s for s in sets}
    v2 = by_name["imagenet-v2"]
    assert v2.classes is None and len(v2.samples) == 12 and v2.metric == "imagenet_v2_top1"
    assert all(Path(p).parent.name == str(c) and len(Path(p).stem) == 40 and p.endswith(".jpeg")
               for p, c in v2.samples)
    a = by_name["imagenet-a"]  # README.txt beside the class folders is not an image; names with spaces are
    assert a.classes == (1, 3) and sorted(Path(p).name for p, _ in a.samples) == sorted(A_NAMES * 2)
    assert {(Path(p).parent.name, c) for p, c in a.samples} == {(A_CLASSES[0], 1), (A_CLASSES[1], 3)}
    r = by_name["imagenet-r"]
    assert r.classes == (0, 2, 3) and sorted(Path(p).name for p, _ in r.samples) == sorted(R_NAMES * 3)
    assert {Path(p).parent.name for p, _ in r.samples} == set(R_CLASSES)
    sketch = by_name["imagenet-sketch"]  # all 1000 classes: scored among every class of the head
    assert sketch.classes is None and len(sketch.samples) == 8
    assert {Path(p).name for p, _ in sketch.samples} == {"sketch_0.JPEG", "sketch_1.JPEG"}
    assert real is not None and real.unlabelled == 1 and len(real.labels) == 7


def test_a_missing_set_is_named_and_skipped(layout: tuple[Path, Path], tmp_path: Path) -> None:
    imagenet, root = layout
    partial = tmp_path / "sets"
    shutil.copytree(root / "imagenet-a", partial / "imagenet-a")
    sets, real, missing = find_sets(partial, ("imagenet-v2", "imagenet-a", "imagenet-real"), list(WNIDS),
                                    _val_files(imagenet))
    assert [s.name for s in sets] == ["imagenet-a"] and real is None
    assert missing == [f"imagenet-v2: {partial / 'imagenetv2-matched-frequency-format-val'} not found, skipped",
                       f"imagenet-real: {partial / 'real.json'} not found, skipped"]


def test_v2_folders_are_class_indices_read_as_numbers(tmp_path: Path) -> None:
    """Sorted as text, folder "10" would be the third of 0, 1, 10, 2 (torchvision's ImageFolder): here it is
    class 10."""
    root = tmp_path / "imagenetv2-matched-frequency-format-val"
    for name in ("0", "1", "10", "2"):
        (root / name).mkdir(parents=True)
        (root / name / "0123456789abcdef0123456789abcdef01234567.jpeg").write_bytes(b"")
    assert [(Path(p).parent.name, c) for p, c in v2_samples(root, 11)] == [("0", 0), ("1", 1), ("10", 10), ("2", 2)]
    with pytest.raises(ConfigError, match="folder 10 names class 10, but the head has 4 classes"):
        v2_samples(root, 4)
    (root / "n01440764").mkdir()
    with pytest.raises(ConfigError, match="'n01440764' .* is not a class index"):
        v2_samples(root, 11)


def test_wnid_folders_map_to_the_heads_classes(tmp_path: Path) -> None:
    head = ["n01440764", "n01443537", "n01484850", "n01491361", "n01494475", "n01496331"]
    root = tmp_path / "imagenet-r"
    for wnid in ("n01496331", "n01443537"):
        (root / wnid).mkdir(parents=True)
        (root / wnid / "art_0.jpg").write_bytes(b"")
    (root / "README.txt").write_text("x")
    samples, classes = wnid_samples(root, head, "imagenet-r")
    assert classes == (1, 5) and [c for _, c in samples] == [1, 5]
    (root / "n09999999").mkdir()
    with pytest.raises(ConfigError, match="'n09999999' .* is not a class of the head"):
        wnid_samples(root, head, "imagenet-r")
    shutil.rmtree(root / "n09999999")
    (root / "shapes").mkdir()
    with pytest.raises(ConfigError, match="'shapes' .* is not a WordNet id"):
        wnid_samples(root, head, "imagenet-r")


def test_the_200_class_sets_score_among_their_classes_only() -> None:
    """Hand-worked: a 6-class head's logits restricted to a set of classes {1, 3, 4}."""
    logits = torch.tensor([[5.0, 1.0, 9.0, 2.0, 3.0, 0.0],   # among 1, 3, 4: 3.0 at class 4 (9.0 at 2 is out)
                           [0.0, 7.0, 0.0, 6.0, 1.0, 8.0],   # 7.0 at class 1 (8.0 at 5 is out)
                           [0.0, 0.0, 0.0, 4.0, 4.5, 0.0]])  # 4.5 at class 4
    assert restricted_predictions(logits, (1, 3, 4)).tolist() == [4, 1, 4]
    assert restricted_predictions(logits, None).tolist() == [2, 5, 4]  # unrestricted: all six


def test_real_labels_follow_the_val_file_names(tmp_path: Path) -> None:
    """Hand-worked: real.json [[0], [], [1, 2], [3]] for val images 1-4, listed in another order; the image with
    no label is left out: predictions 0 (image 1, right), 1 (image 2, out), 2 (image 3, right), 0 (image 4,
    wrong) give 2 of 3."""
    path = tmp_path / "real.json"
    path.write_text(json.dumps([[0], [], [1, 2], [3]]))
    files = [f"/data/val/n0{c}/ILSVRC2012_val_{n:08d}.JPEG" for c, n in ((1, 3), (0, 1), (3, 4), (2, 2))]
    real = read_real(path, files)
    assert real.positions == [0, 1, 2] and real.labels == [[1, 2], [0], [3]] and real.unlabelled == 1
    predictions = torch.tensor([2, 0, 0, 1])  # in val order: images 3, 1, 4, 2
    assert real_accuracy(predictions, real) == pytest.approx(200 / 3)


def test_real_refuses_what_is_not_its_layout(tmp_path: Path) -> None:
    path = tmp_path / "real.json"
    val = ["/v/n01440764/ILSVRC2012_val_00000001.JPEG"]
    for text, message in (("{\"a\": 1}", "not ReaL's layout"), ("[[1000]]", "not ReaL's layout"),
                          ("[[0", "is not JSON"), ("[[]]", "gives none of the 1 val images a label")):
        path.write_text(text)
        with pytest.raises(ConfigError, match=message) as err:
            read_real(path, val)
        assert "\n" not in str(err.value)
    path.write_text("[[0]]")
    with pytest.raises(ConfigError, match="'n01440764_0.JPEG' is not one of them"):
        read_real(path, ["/v/n01440764/n01440764_0.JPEG"])
    with pytest.raises(ConfigError, match=r"\.\. 1\)"):  # numbered past the file's length
        read_real(path, ["/v/n01440764/ILSVRC2012_val_00000002.JPEG"])
