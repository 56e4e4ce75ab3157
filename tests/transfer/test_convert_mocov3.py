"""moco convert of MoCo v3 checkpoints: a ViT to timm's names, a ResNet to torchvision's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torchvision
from typer.testing import CliRunner

from cli import app
from moco_core.config import load_config
from moco_core.model.methods import build_method
from moco_core.pretrain_config import PretrainConfig


def v3_checkpoint(tmp_path: Path, arch: str) -> tuple[Path, dict[str, torch.Tensor]]:
    """An official-layout v3 checkpoint of ``arch`` and its base encoder's state_dict."""
    cfg = load_config(PretrainConfig, "mocov3_vit_embedded" if arch.startswith("vit") else "mocov3_embedded",
                      [f"model.arch={arch}", "v3.dim=16", "v3.mlp_dim=32", "data.path=x"])
    torch.manual_seed(0)
    method = build_method(cfg, world_size=1, num_classes=0, dataset_size=0)
    path = tmp_path / "checkpoint_last.pth.tar"
    torch.save({"epoch": 1, "arch": arch, "state_dict": method.state_dict()}, path)
    return path, method.module.encoder.state_dict()


def test_a_vit_converts_to_a_state_dict_timm_loads(tmp_path: Path) -> None:
    timm = pytest.importorskip("timm")
    src, encoder = v3_checkpoint(tmp_path, "vit_nano_p4")
    dst = tmp_path / "vit.pth"
    result = CliRunner().invoke(app, ["convert", str(src), str(dst), "--to", "timm"])
    assert result.exit_code == 0, result.output
    assert "arch: vit_nano_p4" in result.output
    state = torch.load(dst, weights_only=True)
    # timm's own ViT-Ti family at the same shape (width 96 in 6 blocks, 4-px patches of 32-px images)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=4, embed_dim=96,
                              depth=6, num_classes=10)
    loaded = model.load_state_dict(state, strict=False)
    assert set(loaded.missing_keys) == {"head.weight", "head.bias"} and not loaded.unexpected_keys
    for key, value in state.items():
        assert torch.equal(value, encoder[key]) and torch.equal(model.state_dict()[key], value), key


def test_a_v3_resnet_converts_to_torchvision(tmp_path: Path) -> None:
    src, encoder = v3_checkpoint(tmp_path, "resnet18")
    dst = tmp_path / "r18.pth"
    result = CliRunner().invoke(app, ["convert", str(src), str(dst), "--to", "torchvision"])
    assert result.exit_code == 0, result.output
    state = torch.load(dst, weights_only=True)
    loaded = torchvision.models.resnet18().load_state_dict(state, strict=False)
    assert set(loaded.missing_keys) == {"fc.weight", "fc.bias"} and not loaded.unexpected_keys
    assert torch.equal(state["layer4.1.conv2.weight"], encoder["layer4.1.conv2.weight"])


def test_a_run_directory_converts_its_last_checkpoint(tmp_path: Path) -> None:
    """docs/mocov3.md and README convert a run directory (``moco convert runs/PRESET vit.pth --to timm``); it
    failed with "Is a directory" (the digest of the source was taken of the folder)."""
    src, encoder = v3_checkpoint(tmp_path, "resnet18")  # tmp_path/checkpoint_last.pth.tar: a run directory's last
    result = CliRunner().invoke(app, ["convert", str(tmp_path), str(tmp_path / "r18.pth"), "--to", "torchvision"])
    assert result.exit_code == 0, result.output
    assert f"source: {src}" in result.output
    assert torch.equal(torch.load(tmp_path / "r18.pth", weights_only=True)["conv1.weight"], encoder["conv1.weight"])


@pytest.mark.parametrize(("arch", "to", "message"), [
    ("vit_nano_p4", "detectron2", "holds a ViT (vit_nano_p4): convert it --to timm"),
    ("resnet18", "timm", "holds a ResNet: convert it --to torchvision or --to detectron2"),
])
def test_the_wrong_target_is_one_line(tmp_path: Path, arch: str, to: str, message: str) -> None:
    if arch.startswith("vit"):
        pytest.importorskip("timm")
    src, _ = v3_checkpoint(tmp_path, arch)
    result = CliRunner().invoke(app, ["convert", str(src), str(tmp_path / "out.pth"), "--to", to])
    assert result.exit_code == 2 and result.output.strip() == f"error: {src}: {message}"


def test_detection_refuses_a_vit_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("timm")
    from moco_core.checkpoint import CheckpointError
    from transfer.detection.models import load_resnet

    src, _ = v3_checkpoint(tmp_path, "vit_nano_p4")
    with pytest.raises(CheckpointError) as err:
        load_resnet(str(src))
    assert str(err.value) == f"{src}: holds a ViT (vit_nano_p4), not a ResNet: this command takes ResNets only"


def test_detection_fine_tunes_a_v3_resnet_through_the_existing_path(tmp_path: Path) -> None:
    """A MoCo v3 ResNet checkpoint (official layout: module.base_encoder.*) is a backbone for moco eval coco: it
    fine-tunes, and its record names the v3 pretraining and the format it was read in."""
    from tests.transfer.test_cli_transfer import TINY, sets
    from transfer.embedded import ensure_coco

    src, _ = v3_checkpoint(tmp_path, "resnet18")
    data = ensure_coco(tmp_path / "data", train=8, val=4, size=64)
    out = tmp_path / "coco"
    result = CliRunner().invoke(app, ["eval", "coco", str(src), "-c", "coco_embedded", "--data", str(data),
                                      "--output-dir", str(out), "--engine", "torchvision", "--workers", "0",
                                      "--quiet", *sets(*TINY)])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "result.json").read_text())
    assert record["backbone"]["pretrain"]["method"] == "mocov3" and record["backbone"]["arch"] == "resnet18"
    assert record["backbone"]["format"] == "official-mocov3"
    assert 0 <= record["metrics"]["bbox_AP"] <= 100
