"""The paper's semantic segmentation network (arXiv 1911.05722, appendix A.5) on a torchvision ResNet.

The ResNet's stem and res2-res5 with res5 dilated (stride 1, dilation 2: output stride 16), then two 3x3
convolutions of 256 channels with dilation 6, each followed by BN and ReLU, a 1x1 classifier, and bilinear
upsampling of the logits to the input's size. BN is ordinary, trainable ``nn.BatchNorm2d`` everywhere, as in the
detection protocol (SyncBN across CUDA processes is applied by the caller).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
import torchvision
from torch import nn


def dilate_last_stage(resnet: torchvision.models.ResNet) -> torchvision.models.ResNet:
    """``resnet`` with res5 (``layer4``) at stride 1 and dilation 2, in place: the layout torchvision builds with
    ``replace_stride_with_dilation=[False, False, True]`` (the first block keeps dilation 1 with stride 1, the later
    blocks' 3x3 convolutions take dilation 2), for Bottleneck and BasicBlock ResNets alike (torchvision's own
    constructor refuses dilation in BasicBlock, resnet18/34). The weights are unchanged."""
    for index, block in enumerate(resnet.layer4):
        for module in block.modules():
            if not isinstance(module, nn.Conv2d):
                continue
            module.stride = (1, 1)
            if module.kernel_size == (3, 3) and index > 0:
                module.dilation, module.padding = (2, 2), (2, 2)
    return resnet


class SegmentationNetwork(nn.Module):
    """(N, 3, H, W) RGB in [0, 1] -> (N, K, H, W) logits; in training, with ``targets``, the losses.

    ``forward`` takes a list of images of one size (the shared fine-tuning engine's batch) or a tensor, normalises
    them with ``mean``/``std`` and, given ``targets`` (one ``{"mask": (H, W) int64}`` per image), returns
    ``{"loss_seg": cross-entropy}`` averaged over the pixels whose label is not ``ignore_index``.
    """

    def __init__(self, resnet: torchvision.models.ResNet, num_classes: int, *, output_stride: int = 16,
                 channels: int = 256, convs: int = 2, dilation: int = 6, ignore_index: int = 255,
                 mean: tuple[float, ...] = (0.485, 0.456, 0.406), std: tuple[float, ...] = (0.229, 0.224, 0.225),
                 ) -> None:
        super().__init__()
        if output_stride == 16:
            dilate_last_stage(resnet)
        names = ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4")
        self.backbone = nn.Sequential(OrderedDict((name, getattr(resnet, name)) for name in names))
        layers: list[nn.Module] = []
        width = resnet.fc.in_features  # res5's channels (512 x block expansion)
        for _ in range(convs):
            # A.5: 3x3, 256 channels, dilation 6, BN, ReLU (bias-free: the BN that follows has one)
            layers += [nn.Conv2d(width, channels, 3, padding=dilation, dilation=dilation, bias=False),
                       nn.BatchNorm2d(channels), nn.ReLU(inplace=True)]
            width = channels
        self.head = nn.Sequential(*layers)
        self.classifier = nn.Conv2d(width, num_classes, 1)
        self.ignore_index = ignore_index
        self.register_buffer("mean", torch.tensor(mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, 3, 1, 1), persistent=False)

    def logits(self, images: torch.Tensor) -> torch.Tensor:
        """(N, 3, H, W) in [0, 1] -> (N, K, H, W)."""
        x = (images - self.mean) / self.std
        x = self.classifier(self.head(self.backbone(x)))  # (N, K, H/16, W/16)
        return F.interpolate(x, size=images.shape[-2:], mode="bilinear", align_corners=False)

    def forward(self, images: list[torch.Tensor] | torch.Tensor,
                targets: list[dict[str, torch.Tensor]] | None = None) -> torch.Tensor | dict[str, torch.Tensor]:
        batch = torch.stack(list(images)) if isinstance(images, list) else images
        logits = self.logits(batch)
        if targets is None:
            return logits
        masks = torch.stack([t["mask"] for t in targets])  # (N, H, W)
        # The mean over the labelled pixels; a batch with none (a crop of the padding alone) contributes 0, not NaN.
        total = F.cross_entropy(logits.float(), masks, ignore_index=self.ignore_index, reduction="sum")
        return {"loss_seg": total / (masks != self.ignore_index).sum().clamp(min=1)}
