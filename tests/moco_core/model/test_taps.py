"""moco_core/model/taps.py: each tap against the backbone's own forward and against hooks on its blocks."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from moco_core.model.taps import DenseTaps, FeatureTaps, available_taps, default_dense_tap, default_tap


def test_resnet_taps_are_the_pooled_stages() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=5).eval()
    images = torch.randn(3, 3, 32, 32)
    seen: dict[str, torch.Tensor] = {}
    for name in ("layer2", "layer3"):
        getattr(model, name).register_forward_hook(lambda _m, _i, out, name=name: seen.__setitem__(name, out))
    with torch.no_grad():
        out = FeatureTaps(model, ("layer4", "layer3", "layer2"))(images)
        fc, model.fc = model.fc, nn.Identity()
        pooled = model(images)  # the feature every evaluation reads: fc bypassed
        model.fc = fc
    assert list(out) == ["layer4", "layer3", "layer2"]
    torch.testing.assert_close(out["layer4"], pooled, rtol=0, atol=0)
    torch.testing.assert_close(out["layer3"], seen["layer3"].mean((2, 3)))
    torch.testing.assert_close(out["layer2"], seen["layer2"].mean((2, 3)))
    assert out["layer4"].shape == (3, 512) and out["layer3"].shape == (3, 256)
    assert default_tap(model) == "layer4" and "layer1" in available_taps(model)


def test_resnet_with_a_cifar_stem() -> None:
    """solo-learn's CIFAR ResNets (3x3 conv1, stride 1, no max pool) are read the same way."""
    model = torchvision.models.resnet18(num_classes=5).eval()
    model.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    model.maxpool = nn.Identity()
    fc, model.fc = model.fc, nn.Identity()
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(FeatureTaps(model, ("layer4",))(images)["layer4"], model(images))
    del fc


def test_vit_taps_are_dinov2s_linear_inputs() -> None:
    """cls is the class token the head reads; clsN concatenates the last N blocks' class tokens (earliest first),
    each through the final norm; +avg appends the mean of the last block's patch tokens (hand-built from hooks)."""
    pytest.importorskip("timm")
    from moco_core.model.vit import build_vit

    torch.manual_seed(0)
    model = build_vit("vit_nano_p4", img_size=32, num_classes=7).eval()
    images = torch.randn(2, 3, 32, 32)
    blocks: list[torch.Tensor] = []
    for block in model.blocks:
        block.register_forward_hook(lambda _m, _i, out: blocks.append(out))
    with torch.no_grad():
        out = FeatureTaps(model, ("cls", "cls+avg", "cls4", "cls4+avg"))(images)
        blocks.clear()
        tokens = model.forward_features(images)  # (N, 1 + 64, D) after the final norm
        head_input = model.forward_head(tokens, pre_logits=True)
        normed = [model.norm(b) for b in blocks[-4:]]
    dim = model.embed_dim
    torch.testing.assert_close(out["cls"], head_input)
    torch.testing.assert_close(out["cls+avg"], torch.cat([tokens[:, 0], tokens[:, 1:].mean(1)], 1))
    torch.testing.assert_close(out["cls4"], torch.cat([n[:, 0] for n in normed], 1))
    torch.testing.assert_close(out["cls4+avg"][:, :4 * dim], out["cls4"])
    torch.testing.assert_close(out["cls4+avg"][:, 4 * dim:], normed[-1][:, 1:].mean(1))
    torch.testing.assert_close(out["cls4"][:, 3 * dim:], out["cls"])
    assert default_tap(model) == "cls"
    assert FeatureTaps(model, ("cls4+avg", "cls")).dims(32) == {"cls4+avg": 5 * dim, "cls": dim}


def test_unknown_taps_are_refused() -> None:
    model = torchvision.models.resnet18()
    with pytest.raises(ValueError, match="unknown ResNet feature 'cls'"):
        FeatureTaps(model, ("cls",))
    with pytest.raises(ValueError, match="no feature taps"):
        FeatureTaps(model, ())


def test_vit_with_registers_averages_patches_only() -> None:
    """DINOv2 with registers: the class token is prefix token 0; the 4 register tokens are in no tap."""
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=2, reg_tokens=4, num_classes=0).eval()
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        out = FeatureTaps(model, ("cls+avg",))(images)["cls+avg"]
        tokens = model.forward_features(images)  # (N, 1 + 4 + 16, D)
    assert tokens.shape[1] == 21
    torch.testing.assert_close(out, torch.cat([tokens[:, 0], tokens[:, 5:].mean(1)], 1))


def test_dense_resnet_taps_are_the_stage_maps_at_their_stride() -> None:
    """Each stage's map equals the backbone's own forward up to that stage; the pooled tap is its mean."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    images = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        dense = DenseTaps(model, ("layer4", "layer3"))
        out = dense(images)
        x = model.maxpool(model.relu(model.bn1(model.conv1(images))))
        x3 = model.layer3(model.layer2(model.layer1(x)))
        pooled = FeatureTaps(model, ("layer4",))(images)["layer4"]
    torch.testing.assert_close(out["layer3"], x3)
    assert out["layer4"].shape == (2, 512, 2, 2) and out["layer3"].shape == (2, 256, 4, 4)
    assert dense.stride == {"layer4": 32, "layer3": 16}
    torch.testing.assert_close(out["layer4"].mean((2, 3)), pooled)
    assert default_dense_tap(model) == "layer4" and dense.dims(64) == {"layer4": 512, "layer3": 256}


def test_dense_vit_taps_are_normed_patch_tokens_on_their_grid() -> None:
    """``patch``: the final-norm patch tokens of forward_features laid out on the grid (registers and class token
    left out); ``patch4``: the last 4 blocks' normed tokens concatenated, the last block's last."""
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=16, depth=4, num_heads=2, reg_tokens=2, num_classes=0).eval()
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        dense = DenseTaps(model, ("patch", "patch4"))
        out = dense(images)
        tokens = model.forward_features(images)[:, 3:]  # (N, 16, D): 1 class + 2 register tokens dropped
    grid = tokens.transpose(1, 2).reshape(2, 16, 4, 4)
    torch.testing.assert_close(out["patch"], grid)
    assert out["patch4"].shape == (2, 64, 4, 4)
    torch.testing.assert_close(out["patch4"][:, 48:], grid)
    assert dense.stride == {"patch": 8, "patch4": 8} and default_dense_tap(model) == "patch"
    with pytest.raises(ValueError, match="the ViT has 4 blocks"):
        DenseTaps(model, ("patch5",))
