"""moco_core/run/features.py, the one feature pass: for each of its readers (the kNN monitor and ``moco eval knn``,
the cached linear mode, the frozen protocols' cache) it gives exactly what the backbone's own forward gives, on a
ResNet and a timm ViT; the mode is given back; labels, empty datasets and non-finite features as before."""

from __future__ import annotations

import copy
import functools
import re
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torch.utils.data import TensorDataset

from moco_core.errors import UserError
from moco_core.model.taps import FeatureTaps, default_tap
from moco_core.model.vit import classifier_name
from moco_core.run import knn
from moco_core.run.features import extract_features
from moco_core.run.knn import KnnMonitor, knn_scores
from moco_core.run.progress import LINE

BATCH = 4


@functools.cache
def _built(arch: str) -> nn.Module:
    torch.manual_seed(0)
    if arch == "resnet18":
        return torchvision.models.resnet18(num_classes=3)
    pytest.importorskip("timm")
    from moco_core.model.vit import build_vit

    return build_vit(arch, img_size=32, num_classes=3)


def _resnet() -> nn.Module:
    return copy.deepcopy(_built("resnet18"))  # built once: each test changes its own copy


def _vit() -> nn.Module:
    return copy.deepcopy(_built("vit_nano_p4"))


MODELS = {"resnet18": _resnet, "vit_nano_p4": _vit}


def _data(n: int, seed: int, multilabel: bool = False) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(n, 3, 32, 32, generator=g)
    labels = torch.randint(-1, 2, (n, 4), generator=g) if multilabel else torch.arange(n) % 3
    return TensorDataset(images, labels)


@torch.no_grad()
def _forward(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """The backbone's own forward in eval mode with its classifier an identity (what fc or head reads), batch by
    batch as the pass runs: the reference every reader's features are checked against."""
    name = classifier_name(model)
    head, was_training = getattr(model, name), model.training
    setattr(model, name, nn.Identity())
    try:
        return torch.cat([model.eval()(part) for part in images.split(BATCH)])
    finally:
        setattr(model, name, head)
        model.train(was_training)


@pytest.mark.parametrize("arch", list(MODELS))
def test_the_frozen_protocols_pass_gets_the_backbones_own_features(arch: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """As few-shot and the transfer suite call it (one split, amp asked, the progress line, the timed line)."""
    model = MODELS[arch]().train()
    data = _data(10, seed=1)
    tap = default_tap(model)
    got = extract_features(model, {"train": data}, taps=(tap,), what="dtd train features", batch_size=BATCH, amp=True,
                           progress=LINE, timed=True)
    assert model.training and list(got) == ["train"]  # given back in the mode it had
    assert list(got["train"].features) == [tap] and got["train"].features[tap].dtype == torch.float32
    assert torch.equal(got["train"].features[tap], _forward(model, data.tensors[0]))
    assert torch.equal(got["train"].labels, data.tensors[1]) and len(got["train"]) == 10
    assert re.fullmatch(r"dtd train features: 10 images in \d\d:\d\d \(\d+ images/s\)\n", capsys.readouterr().err)


@pytest.mark.parametrize("arch", list(MODELS))
def test_the_knn_monitor_and_the_cached_linear_mode_get_the_backbones_own_features(
        arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The two call sites end to end: kNN votes with the normalised forward features (bank: train, queries: val);
    the cached linear mode trains the model's own fc on the forward features."""
    from classification.linear import LinearConfig, _cached
    from classification.splits import LinearDataConfig

    model = MODELS[arch]().train()
    train, val = _data(9, seed=0), _data(6, seed=1)
    voted: list[tuple[torch.Tensor, ...]] = []

    def scores(queries: torch.Tensor, bank: torch.Tensor, labels: torch.Tensor, *args: object,
               **kwargs: object) -> torch.Tensor:
        voted.append((queries, bank, labels))
        return knn_scores(queries, bank, labels, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(knn, "knn_scores", scores)
    KnnMonitor(train, val, 3, device=torch.device("cpu"), workers=0, batch_size=BATCH, k=5)(model)
    assert model.training
    (queries, bank, labels), = voted
    assert torch.equal(bank, F.normalize(_forward(model, train.tensors[0]), dim=1))
    assert torch.equal(queries, F.normalize(_forward(model, val.tensors[0]), dim=1))
    assert torch.equal(labels, train.tensors[1])

    cached_train, cached_val, head = _cached(model, SimpleNamespace(train=train, val=val), BATCH,  # type: ignore[arg-type]
                                             LinearConfig(data=LinearDataConfig(workers=0)), torch.device("cpu"))
    for (x, y, index), data in ((cached_train.tensors, train), (cached_val.dataset.tensors, val)):
        assert torch.equal(x, _forward(model, data.tensors[0])) and torch.equal(y, data.tensors[1])
        assert torch.equal(index, torch.arange(len(data)))
    assert head.fc is getattr(model, classifier_name(model))


def test_several_taps_in_one_pass_in_order_and_multilabel_rows() -> None:
    model = _resnet()
    data = _data(10, seed=1, multilabel=True)
    got = extract_features(model, {"train": data}, taps=("layer4", "layer2"), what="train", batch_size=BATCH)["train"]
    with torch.no_grad():
        want = FeatureTaps(model.eval(), ("layer4", "layer2"))(data.tensors[0])
    assert list(got.features) == ["layer4", "layer2"]
    torch.testing.assert_close(got.features["layer2"], want["layer2"], rtol=1e-5, atol=1e-5)
    assert torch.equal(got.features["layer4"], _forward(model, data.tensors[0]))
    assert got.labels.shape == (10, 4) and torch.equal(got.labels, data.tensors[1])
    part = got.subset([4, 1])
    assert torch.equal(part.labels, data.tensors[1][[4, 1]]) and part.features["layer4"].shape == (2, 512)


@pytest.mark.parametrize(("names", "expected"), [
    (("train images", "val images"), "kNN: the backbone's features (train images, val images) are not finite"),
    (("train",), "kNN: the backbone's features (layer4) are not finite"),
])
def test_non_finite_features_are_one_error_naming_the_datasets_or_the_taps(names: tuple[str, ...],
                                                                           expected: str) -> None:
    model = _resnet()
    with torch.no_grad():
        model.layer4[1].bn2.running_var.fill_(-1.0)  # sqrt of a negative variance: NaN
    with pytest.raises(UserError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        extract_features(model, {name: _data(4, seed=0) for name in names}, taps=("layer4",), what="kNN")


def test_an_empty_dataset_is_one_error() -> None:
    with pytest.raises(UserError, match="^train: the dataset is empty; no features to compute$"):
        extract_features(_resnet(), {"train": _data(0, seed=0)}, taps=("layer4",), what="train")
