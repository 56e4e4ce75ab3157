"""Export stays symmetric (issue 47): whatever is read for a ResNet or a ViT is written back as torchvision or timm
weights; a .safetensors destination says what it was converted from, and reads back as that. Transfer tasks feed
the detector the weights' normalisation."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
import torchvision
from typer.testing import CliRunner

from cli import app
from moco_core.checkpoint import CheckpointError
from moco_core.model.backbone import load_backbone, load_resnet
from moco_core.model.weights.detect import read_weights
from tests import weights_layouts as layouts
from transfer.config import with_normalisation
from transfer.convert import convert_file
from transfer.detection.config import load_transfer_config
from transfer.detection.models import build_detector


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("methods")
    r18 = layouts.resnet_state()
    return {"dino-vit": layouts.dino_full(root / "dino_full_checkpoint.pth", layouts.timm_vit_state(), vit=True),
            "dinov2-reg": layouts._save(layouts.dinov2_state(1, registers=4, swiglu=True), root / "dinov2_reg4.pth"),
            "byol": layouts.torchvision_file(root / "byol.pth", layouts.without(r18, "fc.")),
            "simclr-v2": layouts.simclr_v2(root / "r50_1x_sk0.pth", layouts.resnet_state("resnet50")),
            "solo": layouts.solo_learn(root / "solo" / "byol.ckpt", layouts.resnet_state(cifar=True))}


def _features(model: torch.nn.Module) -> torch.Tensor:
    name = "head" if hasattr(model, "patch_embed") else "fc"
    setattr(model, name, torch.nn.Identity())
    with torch.no_grad():
        return model.eval()(torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)))


@pytest.mark.parametrize("name", ["dino-vit", "dinov2-reg"])
def test_a_vit_written_as_timm_safetensors_reads_back_as_what_it_was(files: dict, name: str, tmp_path: Path) -> None:
    summary = convert_file(files[name], tmp_path / "vit.safetensors", to="timm")
    assert (summary["method"], summary["encoder"]) == ({"dino-vit": "dino", "dinov2-reg": "dinov2"}[name], "teacher")
    back = read_weights(tmp_path / "vit.safetensors")  # no --weights-format: the file says what it is
    original = read_weights(files[name])
    assert (back.method, back.stated_by, back.found.layout) == (original.method, "file", "moco-convert")
    assert back.found.vit == original.found.vit  # heads, registers, layer scale, SwiGLU, position resampling
    assert torch.equal(_features(load_backbone(str(tmp_path / "vit.safetensors"), 3)[0]),
                       _features(load_backbone(str(files[name]), 3)[0]))


def test_timm_builds_the_converted_vit_with_exactly_its_head_missing(files: dict, tmp_path: Path) -> None:
    """The timm names are timm's own: its ViT of that shape loads the file, only head.* missing."""
    convert_file(files["dino-vit"], tmp_path / "vit.pth", to="timm")
    state = torch.load(tmp_path / "vit.pth", weights_only=True)
    v = layouts.VIT
    model = timm.models.vision_transformer.VisionTransformer(
        img_size=v["patch"] * v["grid"], patch_size=v["patch"], embed_dim=v["width"], depth=v["depth"],
        num_heads=v["heads"], num_classes=10)
    result = model.load_state_dict(state, strict=False)
    assert sorted(result.missing_keys) == ["head.bias", "head.weight"] and not result.unexpected_keys


@pytest.mark.parametrize(("name", "named", "arch"), [("byol", "byol", "resnet18"), ("simclr-v2", None, "resnet50")])
def test_a_resnet_written_as_torchvision_weights_loads_into_torchvision(files: dict, name: str, named: str | None,
                                                                        arch: str, tmp_path: Path) -> None:
    summary = convert_file(files[name], tmp_path / "r.pth", to="torchvision", weights_format=named)
    state = torch.load(tmp_path / "r.pth", weights_only=True)
    result = getattr(torchvision.models, arch)().load_state_dict(state, strict=False)
    assert sorted(result.missing_keys) == ["fc.bias", "fc.weight"] and not result.unexpected_keys
    assert summary["normalisation"] == ("none" if name == "simclr-v2" else "imagenet")
    with pytest.raises(CheckpointError, match="does not say which method trained it"):  # a .pth says nothing
        read_weights(tmp_path / "r.pth")
    convert_file(files[name], tmp_path / "r.safetensors", to="torchvision", weights_format=named)
    back = read_weights(tmp_path / "r.safetensors")
    assert (back.method, back.normalisation.name) == (summary["method"], summary["normalisation"])


def test_conversions_that_cannot_hold_are_refused_in_one_line(files: dict, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="CIFAR-stem ResNet .* no detectron2 backbone takes"):
        convert_file(files["solo"], tmp_path / "solo.pkl")
    with pytest.raises(CheckpointError, match="does not say which method trained it"):
        convert_file(files["byol"], tmp_path / "byol.pkl")
    res = CliRunner().invoke(app, ["convert", str(files["byol"]), str(tmp_path / "byol.pkl"), "--weights-format",
                                   "byol"])
    assert res.exit_code == 0 and "method: byol" in res.output, res.output


def test_a_detector_normalises_as_the_weights_method_trained(files: dict) -> None:
    """SimCLR's converted weights expect [0, 1] pixels: the detector built on them has mean 0, std 1 (in
    detectron2's 0-255 units too); a config that sets input.mean keeps its own."""
    resnet, info = load_resnet(str(files["simclr-v2"]), arch_option="detector.arch")
    cfg = with_normalisation(load_transfer_config("voc", "voc_embedded", []), info.normalisation)
    assert (cfg.input.mean, cfg.input.std) == ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    detector = build_detector(cfg, resnet, 3)
    assert detector.transform.image_mean == [0.0, 0.0, 0.0] and detector.transform.image_std == [1.0, 1.0, 1.0]
    from transfer.detection.detectron2_config import detectron2_options

    options = detectron2_options(cfg, num_classes=3)
    assert (options["MODEL.PIXEL_MEAN"], options["MODEL.PIXEL_STD"]) == ([0.0] * 3, [255.0] * 3)
    given = load_transfer_config("voc", "voc_embedded", ["input.mean=[0.5,0.5,0.5]"])
    assert with_normalisation(given, info.normalisation).input.mean == (0.5, 0.5, 0.5)
