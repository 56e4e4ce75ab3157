"""Backbones: torchvision ResNets whose fc is replaced by the contrastive head.

Module names are torchvision's, so a checkpoint's ``encoder_q.*`` keys load into ``torchvision.models.<arch>()``
exactly as the official ``main_lincls.py`` expects.
"""

from __future__ import annotations

import torchvision
from torch import nn

from moco_core.config import ARCHS


def build_encoder(arch: str, *, dim: int, mlp: bool) -> nn.Module:
    """A ResNet mapping images (N, 3, H, W) to features (N, dim).

    v1 (arXiv 1911.05722): fc = Linear(feat, dim). v2 (arXiv 2003.04297): fc = Linear(feat, feat), ReLU,
    Linear(feat, dim); named ``fc.0`` and ``fc.2`` as in the official checkpoints.
    """
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; expected one of {list(ARCHS)}")
    net = getattr(torchvision.models, arch)(num_classes=dim)
    if mlp:
        hidden = net.fc.in_features
        net.fc = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(inplace=True), net.fc)
    return net
