"""Format detection of evaluation inputs, and the exact missing-key check."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torchvision

from moco_core import checkpoint
from moco_core.model.backbone import infer_arch, load_backbone, load_resnet
from moco_core.model.methods import build_moco
from moco_core.pretrain_config import ModelConfig


@pytest.fixture(scope="module")
def moco_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ckpts")
    torch.manual_seed(0)
    moco = build_moco(ModelConfig(arch="resnet18", mlp=True, queue_size=16, bn_groups=2), world_size=1)
    state = checkpoint.to_official(moco.state_dict())
    ours, official, tv = root / "ours.pth.tar", root / "official.pth.tar", root / "resnet18.pth"
    torch.save({"epoch": 5, "arch": "resnet18", "state_dict": state, "optimizer": {}, "format": "moco-suite",
                "method": "moco", "config": {"model": {"arch": "resnet18"}}}, ours)
    torch.save({"epoch": 5, "arch": "resnet18", "state_dict": state, "optimizer": {}}, official)
    torch.save(torchvision.models.resnet18().state_dict(), tv)
    return {"ours": ours, "official": official, "torchvision": tv, "moco": moco}  # type: ignore[dict-item]


@pytest.mark.parametrize(("name", "fmt", "method", "named"), [
    ("ours", "moco-suite", "moco", None), ("official", "official-moco", "moco", None),
    ("torchvision", "torchvision", "supervised", "supervised"),
])
def test_each_format_loads_with_only_fc_new(moco_files: dict, name: str, fmt: str, method: str,
                                            named: str | None) -> None:
    model, info = load_backbone(str(moco_files[name]), 10, weights_format=named)
    assert (info.format, info.arch, info.pretrain["method"]) == (fmt, "resnet18", method)
    assert info.pretrain["stated_by"] == ("--weights-format" if named else "file")
    assert info.sha256 and len(info.sha256) == 64
    assert model.fc.weight.shape == (10, 512)
    assert torch.equal(model.fc.bias, torch.zeros(10))
    assert 0.005 < model.fc.weight.std().item() < 0.015  # N(0, 0.01)
    if name != "torchvision":
        encoder = moco_files["moco"].encoder
        assert torch.equal(model.conv1.weight, encoder.conv1.weight)
        assert torch.equal(model.layer4[1].bn2.running_var, encoder.layer4[1].bn2.running_var)


def test_a_plain_torchvision_resnet_is_not_recorded_as_supervised(moco_files: dict) -> None:
    """Issue 47: a torchvision-named ResNet without provenance could be supervised, DINO, Barlow Twins or BYOL
    weights; it was recorded as ``method: supervised``. It is refused with the candidates and the option that
    settles it, and the method the user names is the one recorded."""
    with pytest.raises(checkpoint.CheckpointError) as err:
        load_backbone(str(moco_files["torchvision"]), 10)
    message = str(err.value)
    assert "\n" not in message and "does not say which method trained it" in message
    assert "supervised, moco, mocov3, dino, swav" in message and "barlowtwins, byol" in message
    assert "--weights-format" in message
    _, info = load_backbone(str(moco_files["torchvision"]), 10, weights_format="dino")
    assert (info.pretrain["method"], info.pretrain["stated_by"], info.encoder) == ("dino", "--weights-format",
                                                                                  "teacher")


def test_a_named_format_never_overrides_what_the_file_says(moco_files: dict) -> None:
    with pytest.raises(checkpoint.CheckpointError, match=r"states its method, moco; --weights-format dino contradicts"):
        load_backbone(str(moco_files["official"]), 10, weights_format="dino")
    with pytest.raises(checkpoint.CheckpointError, match="unknown weights format 'dinov3'"):
        load_backbone(str(moco_files["torchvision"]), 10, weights_format="dinov3")
    with pytest.raises(checkpoint.CheckpointError, match="mae's weights are no resnets"):
        load_backbone(str(moco_files["torchvision"]), 10, weights_format="mae")


def test_random_init() -> None:
    model, info = load_backbone("random", 3, arch="resnet18")
    assert (info.format, info.sha256, info.arch) == ("random", None, "resnet18")
    assert model.fc.out_features == 3
    assert info.normalisation["name"] == "imagenet" and info.encoder == "none"
    cifar, info = load_backbone("random", 3, arch="resnet18_cifar")  # the floor of CIFAR-stem rows (solo-learn)
    assert (cifar.conv1.kernel_size, type(cifar.maxpool).__name__, info.arch) == ((3, 3), "Identity", "resnet18_cifar")
    with pytest.raises(checkpoint.CheckpointError, match="unknown arch 'resnet18_cifar'"):  # no detector takes it
        load_resnet("random", arch="resnet18_cifar")


def test_unknown_and_wrong_inputs_are_rejected(tmp_path: Path, moco_files: dict) -> None:
    d2 = tmp_path / "model_final.pth"
    torch.save({"model": {"backbone.res2.0.conv1.weight": torch.zeros(1)}, "__author__": "x"}, d2)
    with pytest.raises(checkpoint.CheckpointError, match=r"found a dict with keys model, __author__ \(a detectron2"):
        load_backbone(str(d2), 10)
    with pytest.raises(checkpoint.CheckpointError, match="holds resnet18 weights, but --arch resnet50"):
        load_backbone(str(moco_files["ours"]), 10, arch="resnet50")
    with pytest.raises(checkpoint.CheckpointError, match="not found"):
        load_backbone(str(tmp_path / "absent.pth"), 10)


class _Payload:
    def __reduce__(self) -> tuple:
        return (os.mkdir, (os.environ["MOCO_TEST_MARKER"],))


def test_malicious_pickle_is_refused_without_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "payload-ran"
    monkeypatch.setenv("MOCO_TEST_MARKER", str(marker))
    evil = tmp_path / "evil.pth"
    torch.save({"conv1.weight": _Payload()}, evil)
    with pytest.raises(checkpoint.CheckpointError, match="refused"):
        load_backbone(str(evil), 10)
    assert not marker.exists()


@pytest.mark.parametrize("arch", ["resnet18", "resnet34", "resnet50", "resnet101", "wide_resnet50_2"])
def test_infer_arch(arch: str) -> None:
    state = getattr(torchvision.models, arch)().state_dict()
    assert infer_arch({k: v for k, v in state.items() if not k.startswith("fc.")}) == arch


@pytest.mark.parametrize("protocol", [2, 4])
def test_a_detectron2_pkl_is_refused_with_a_hint(tmp_path: Path, protocol: int, moco_files: dict) -> None:
    """A converted .pkl (numpy arrays, as the official converter and ``moco convert`` write) is not an input of
    the linear evaluation; the message says what the file is instead of just 'refused'."""
    import pickle

    import numpy as np

    pkl = tmp_path / "moco_r18.pkl"
    with pkl.open("wb") as f:
        pickle.dump({"model": {"stem.conv1.weight": np.zeros((64, 3, 7, 7), np.float32)}, "__author__": "MOCO",
                     "matching_heuristics": True}, f, protocol=protocol)
    with pytest.raises(checkpoint.CheckpointError) as err:
        load_backbone(str(pkl), 10)
    message = str(err.value)
    assert "\n" not in message and "refused, loading it would call numpy" in message
    assert "like a detectron2 .pkl: give the pretraining checkpoint it was converted from" in message


def test_the_refusal_names_what_a_payload_would_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCO_TEST_MARKER", str(tmp_path / "payload-ran"))
    evil = tmp_path / "evil.pth"
    torch.save({"conv1.weight": _Payload()}, evil)
    with pytest.raises(checkpoint.CheckpointError, match=r"would call posix\.mkdir \(only tensors and plain data"):
        load_backbone(str(evil), 10)
    assert not (tmp_path / "payload-ran").exists()


def test_facts_give_the_steps_of_an_unfinished_epoch(moco_files: dict, tmp_path: Path) -> None:
    """A run stopped in its third epoch writes epoch 2 (the epoch to run next) and its sampler position: the
    record says 2 epochs completed and 6 steps into the third, not only "2"."""
    stopped = tmp_path / "stopped.pth.tar"
    saved = torch.load(moco_files["ours"], weights_only=True)
    torch.save({**saved, "epoch": 2, "global_step": 36, "sampler": {"epoch": 2, "position": 6}}, stopped)
    facts = {name: load_backbone(str(path), 10)[1].pretrain for name, path in
             (("stopped", stopped), ("ours", moco_files["ours"]), ("official", moco_files["official"]))}
    assert (facts["stopped"]["epochs"], facts["stopped"]["partial_epoch_steps"]) == (2, 6)
    assert (facts["ours"]["epochs"], facts["ours"]["partial_epoch_steps"]) == (5, 0)  # written at an epoch's end
    assert (facts["official"]["epochs"], facts["official"]["partial_epoch_steps"]) == (5, 0)  # main_moco.py's
