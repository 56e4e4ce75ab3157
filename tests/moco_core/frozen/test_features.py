"""moco_core/frozen/features.py: the cache keyed by what made the features, never read stale or damaged (the
pass that computes them: tests/moco_core/run/test_features.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from moco_core.errors import UserError
from moco_core.frozen.features import (
    FeatureSet,
    FeatureTransform,
    cache_path,
    cached_features,
    feature_key,
    samples_digest,
    transform_for,
    weights_identity,
)
from moco_core.model.backbone import BackboneInfo


def _key(**changes: object) -> dict:
    info = BackboneInfo("w.pth", "torchvision", "resnet18", "ab" * 32, {})
    base = dict(weights=weights_identity(info), transform=FeatureTransform(36, 32),
                dataset={"root": "/data/dtd", "split": "train", "files": "f" * 64}, taps=("layer4",), amp=True,
                device="cpu")
    base.update(changes)
    return feature_key(**base)  # type: ignore[arg-type]


def _counted(result: FeatureSet) -> tuple[list[int], object]:
    calls: list[int] = []

    def compute() -> FeatureSet:
        calls.append(1)
        return FeatureSet({k: v.clone() for k, v in result.features.items()}, result.labels.clone())
    return calls, compute


def test_cache_reads_back_what_it_wrote_and_a_changed_key_is_a_new_file(tmp_path: Path) -> None:
    made = FeatureSet({"layer4": torch.randn(5, 8)}, torch.arange(5))
    calls, compute = _counted(made)
    first = cached_features(tmp_path, _key(), compute)
    again = cached_features(tmp_path, _key(), compute)
    assert calls == [1] and again.cached and not first.cached
    torch.testing.assert_close(again.features["layer4"], made.features["layer4"], rtol=0, atol=0)
    assert torch.equal(again.labels, made.labels) and again.key == _key()
    for other in (_key(transform=FeatureTransform(36, 28)), _key(taps=("layer3",)),
                  _key(dataset={"root": "/data/dtd", "split": "val", "files": "f" * 64}),
                  _key(weights={"random": True, "arch": "resnet18", "seed": 1}), _key(device="cuda")):
        assert cache_path(tmp_path, other) != cache_path(tmp_path, _key())
    cached_features(tmp_path, _key(transform=FeatureTransform(36, 28)), compute)
    assert calls == [1, 1] and len(list(tmp_path.glob("features-*.pt"))) == 2
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "header", "other-key"])
def test_a_damaged_cache_file_is_recomputed_with_a_line(tmp_path: Path, damage: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    made = FeatureSet({"layer4": torch.randn(5, 8)}, torch.arange(5))
    calls, compute = _counted(made)
    cached_features(tmp_path, _key(), compute)
    path = cache_path(tmp_path, _key())
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-20] ^= 0x40
    elif damage == "truncate":
        data = data[: len(data) - 100]
    elif damage == "empty":
        data = bytearray()
    elif damage == "header":
        data[20] = ord("{")
    else:  # a file of another key in this one's place
        other = cache_path(tmp_path, _key(taps=("layer3",)))
        cached_features(tmp_path, _key(taps=("layer3",)), compute)
        data = bytearray(other.read_bytes())
        calls.pop()
    path.write_bytes(bytes(data))
    got = cached_features(tmp_path, _key(), compute)
    assert calls == [1, 1] and not got.cached
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"warning: feature cache {path}" in err and "recomputing" in err
    assert cached_features(tmp_path, _key(), compute).cached and calls == [1, 1]  # rewritten whole


def test_a_failed_computation_leaves_no_file(tmp_path: Path) -> None:
    def compute() -> FeatureSet:
        raise UserError("broken")
    with pytest.raises(UserError):
        cached_features(tmp_path, _key(), compute)
    assert list(tmp_path.iterdir()) == []


def test_samples_digest_follows_files_labels_and_order(tmp_path: Path) -> None:
    for name, size in (("a.jpg", 3), ("b.jpg", 5)):
        (tmp_path / name).write_bytes(b"x" * size)
    a, b = str(tmp_path / "a.jpg"), str(tmp_path / "b.jpg")
    base = samples_digest(tmp_path, [(a, 0), (b, 1)])
    assert base == samples_digest(tmp_path, [(a, 0), (b, 1)])
    changed = [samples_digest(tmp_path, s) for s in ([(b, 1), (a, 0)], [(a, 1), (b, 1)], [(a, 0)],
                                                       [(a, 0), (b, torch.tensor([1, 0]))])]
    (tmp_path / "b.jpg").write_bytes(b"x" * 6)
    changed.append(samples_digest(tmp_path, [(a, 0), (b, 1)]))
    assert len({base, *changed}) == 6


def test_transform_normalisation_comes_from_the_weights_where_they_say() -> None:
    plain = transform_for(BackboneInfo("random", "random", "resnet18", None, {}))
    assert plain.mean == (0.485, 0.456, 0.406) and plain.interpolation == "bicubic" and plain.crop_size == 224
    simclr = transform_for(BackboneInfo("s.pth", "torchvision", "resnet50", "0" * 64, {"method": "simclr-v1"},
                                        normalisation={"name": "none", "mean": [0, 0, 0], "std": [1, 1, 1]}),
                           crop_size=32, resize=32)
    assert simclr.mean == (0.0, 0.0, 0.0) and simclr.std == (1.0, 1.0, 1.0)
    from PIL import Image
    image = Image.new("RGB", (48, 40), (255, 0, 0))
    view = simclr.build()(image)
    assert view.shape == (3, 32, 32) and view[0].min() == 1.0 and view[1].max() == 0.0
    assert weights_identity(BackboneInfo("random", "random", "resnet18", None, {}), 3) == {
        "random": True, "arch": "resnet18", "seed": 3}
