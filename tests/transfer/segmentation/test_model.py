"""The paper's segmentation network (A.5): conv5 dilated as torchvision dilates it, the head's layout, the loss."""

from __future__ import annotations

import math

import pytest
import torch
import torchvision
from torch import nn

from transfer.segmentation.model import SegmentationNetwork, dilate_last_stage


def test_dilation_matches_torchvision_on_resnet50() -> None:
    torch.manual_seed(0)
    reference = torchvision.models.resnet50(replace_stride_with_dilation=[False, False, True]).eval()
    ours = dilate_last_stage(torchvision.models.resnet50()).eval()
    ours.load_state_dict(reference.state_dict())
    for a, b in zip(ours.layer4.modules(), reference.layer4.modules(), strict=True):
        if isinstance(a, nn.Conv2d):
            assert (a.stride, a.dilation, a.padding) == (b.stride, b.dilation, b.padding)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        features = nn.Sequential(*list(ours.children())[:-2])(x)
        assert features.shape[-2:] == (4, 4)  # output stride 16
        assert torch.allclose(features, nn.Sequential(*list(reference.children())[:-2])(x), atol=1e-5)


def test_basic_block_resnet_reaches_output_stride_16() -> None:
    # torchvision refuses dilation in BasicBlock; ours dilates resnet18's 3x3 convs of the later blocks
    resnet = dilate_last_stage(torchvision.models.resnet18())
    assert [c.dilation for c in resnet.layer4[1].modules() if isinstance(c, nn.Conv2d)] == [(2, 2), (2, 2)]
    assert resnet.layer4[0].conv1.stride == (1, 1) and resnet.layer4[0].downsample[0].stride == (1, 1)
    network = SegmentationNetwork(torchvision.models.resnet18(), 5)
    assert network.backbone(torch.zeros(1, 3, 96, 64)).shape == (1, 512, 6, 4)


def test_head_is_the_papers() -> None:
    network = SegmentationNetwork(torchvision.models.resnet50(), 21)
    convs = [m for m in network.head if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.dilation, c.padding) for c in convs] == [
        (2048, 256, (3, 3), (6, 6), (6, 6)), (256, 256, (3, 3), (6, 6), (6, 6))]
    kinds = [type(m) for m in network.head]
    assert kinds == [nn.Conv2d, nn.BatchNorm2d, nn.ReLU] * 2
    assert network.classifier.kernel_size == (1, 1) and network.classifier.out_channels == 21


def test_logits_are_upsampled_to_the_input_and_the_loss_skips_ignored_pixels() -> None:
    network = SegmentationNetwork(torchvision.models.resnet18(), 4, channels=8).eval()
    with torch.no_grad():
        assert network(torch.rand(2, 3, 50, 70)).shape == (2, 4, 50, 70)
        nn.init.zeros_(network.classifier.weight)
        nn.init.zeros_(network.classifier.bias)  # equal logits: the loss of every pixel is log 4
        mask = torch.full((50, 70), 255)
        mask[:10] = 2
        losses = network([torch.rand(3, 50, 70)], [{"mask": mask}])
        assert losses["loss_seg"].item() == pytest.approx(math.log(4), rel=1e-5)
        all_ignored = network([torch.rand(3, 50, 70)], [{"mask": torch.full((50, 70), 255)}])
        assert all_ignored["loss_seg"].item() == 0.0  # a crop of padding alone: 0, never NaN


def test_normalisation_is_torchvision_s() -> None:
    network = SegmentationNetwork(torchvision.models.resnet18(), 2).eval()
    grey = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1).expand(1, 3, 32, 32)
    seen: dict[str, torch.Tensor] = {}
    network.backbone.conv1.register_forward_hook(lambda m, i, o: seen.update(input=i[0]))
    with torch.no_grad():
        network(grey)
    assert seen["input"].abs().max() < 1e-6  # the mean colour becomes 0
