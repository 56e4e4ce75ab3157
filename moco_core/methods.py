"""Pretraining methods: what differs between them is the model, the logits and what happens after each step.

Data loading, schedules, checkpoints, resume, distributed running and metrics are shared (train.py, engine.py).
A method turns a batch into (logits, labels) for cross-entropy, and may update its state after the optimizer
step (MoCo enqueues its keys). Adding a mechanism means adding one small class here.
"""

from __future__ import annotations

from typing import Any

import torch
import torchvision
from torch import nn

from moco_core import checkpoint
from moco_core.batchnorm import split_batchnorm
from moco_core.config import ModelConfig
from moco_core.encoders import build_encoder
from moco_core.moco import MoCo


def build_moco(cfg: ModelConfig, *, world_size: int) -> MoCo:
    """Translate the model config into a MoCo module, with the BN handling it asks for."""
    encoder = build_encoder(cfg.arch, dim=cfg.dim, mlp=cfg.mlp)
    if cfg.shuffle_bn == "sync":
        encoder = nn.SyncBatchNorm.convert_sync_batchnorm(encoder)
    elif cfg.shuffle_bn == "shuffle" and world_size == 1 and cfg.bn_groups > 1:
        encoder = split_batchnorm(encoder, cfg.bn_groups)  # emulate bn_groups GPUs in one process
    return MoCo(encoder, dim=cfg.dim, queue_size=cfg.queue_size, momentum=cfg.momentum,
                temperature=cfg.temperature, shuffle_keys=cfg.shuffle_bn == "shuffle")


class MocoMethod:
    """MoCo (arXiv 1911.05722): queue + momentum encoder; two views of each image."""

    name = "moco"
    views = 2
    needs_labels = False

    def __init__(self, cfg: ModelConfig, *, world_size: int, num_classes: int) -> None:
        self.module = build_moco(cfg, world_size=world_size)

    @property
    def encoder(self) -> nn.Module:
        """The network whose backbone evaluations use (the query encoder)."""
        return self.module.encoder

    def forward(self, model: nn.Module, images: Any, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Any]:
        im_q, im_k = images
        return model(im_q, im_k)  # logits (N, 1+K), labels (N,), keys to enqueue

    def after_step(self, keys: torch.Tensor) -> None:
        self.module.enqueue(keys)  # after backward: the step's logits used the queue before this write

    def state_dict(self) -> dict[str, torch.Tensor]:
        return checkpoint.to_official(self.module.state_dict())

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.module.load_state_dict(checkpoint.from_official(state))

    def extras(self) -> dict[str, Any]:
        return {"queue_ptr": int(self.module.queue_ptr)}


class SupervisedMethod:
    """The supervised baseline: the same backbone trained with labels by cross-entropy, one view an image.

    Its checkpoint's state_dict is a plain torchvision ResNet's (fc = the classifier), which the evaluations
    read like torchvision's own ImageNet weights.
    """

    name = "supervised"
    views = 1
    needs_labels = True

    def __init__(self, cfg: ModelConfig, *, world_size: int, num_classes: int) -> None:
        self.module = getattr(torchvision.models, cfg.arch)(num_classes=num_classes)
        if cfg.shuffle_bn == "sync":
            self.module = nn.SyncBatchNorm.convert_sync_batchnorm(self.module)

    @property
    def encoder(self) -> nn.Module:
        return self.module

    def forward(self, model: nn.Module, images: Any, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Any]:
        return model(images), target, None

    def after_step(self, state: Any) -> None:
        pass

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.module.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.module.load_state_dict(state)

    def extras(self) -> dict[str, Any]:
        return {}


Method = MocoMethod | SupervisedMethod
METHODS: dict[str, type[MocoMethod] | type[SupervisedMethod]] = {"moco": MocoMethod, "supervised": SupervisedMethod}
