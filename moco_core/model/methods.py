"""Pretraining methods: what differs between them is the model, the logits and what happens after each step.

Data loading, schedules, checkpoints, resume, distributed running and metrics are shared (run/train.py, run/engine.py).
A method turns a batch into (logits, labels) for cross-entropy, and may update its state after the optimizer
step (MoCo enqueues its keys, the memory bank updates its rows). Adding a mechanism means adding one small
class here. ``transform`` names the views a sample gives: "two_crops" (query and key), "one_crop" (the
pretraining augmentation once) or "supervised" (torchvision's classification crop).
"""

from __future__ import annotations

from typing import Any

import torch
import torchvision
from torch import nn

from moco_core import checkpoint
from moco_core.config import VIT_ARCHS
from moco_core.model.batchnorm import split_batchnorm
from moco_core.model.encoders import build_encoder
from moco_core.model.mechanisms import EndToEnd, MemoryBank
from moco_core.model.moco import MoCo
from moco_core.model.mocov3 import MoCoV3, momentum_at
from moco_core.pretrain_config import MocoV3Config, ModelConfig, PretrainConfig


def build_moco(cfg: ModelConfig, *, world_size: int) -> MoCo:
    """Translate the model config into a MoCo module, with the BN handling it asks for."""
    return MoCo(_contrastive_encoder(cfg, world_size), dim=cfg.dim, queue_size=cfg.queue_size, momentum=cfg.momentum,
                temperature=cfg.temperature, shuffle_keys=cfg.shuffle_bn == "shuffle", queue_init=cfg.queue_init)


class MocoMethod:
    """MoCo (arXiv 1911.05722): queue + momentum encoder; two views of each image."""

    name = "moco"
    transform = "two_crops"
    needs_labels = False
    loss_scale = 1.0  # the loss is the mean cross-entropy of the logits

    def __init__(self, cfg: ModelConfig, *, world_size: int, num_classes: int, dataset_size: int) -> None:
        self.module = build_moco(cfg, world_size=world_size)

    @property
    def encoder(self) -> nn.Module:
        """The network whose backbone evaluations use (the query encoder)."""
        return self.module.encoder

    def forward(self, model: nn.Module, images: Any, target: torch.Tensor,
                index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Any]:
        im_q, im_k = images
        return model(im_q, im_k)  # logits (N, 1+K), labels (N,), keys to enqueue

    def after_step(self, keys: torch.Tensor) -> None:
        self.module.enqueue(keys)  # after backward: the step's logits used the queue before this write

    def has_negatives(self) -> bool:
        """Whether the next step has a negative to tell its positive from (an empty queue has none)."""
        return self.module.has_negatives

    def state_dict(self) -> dict[str, torch.Tensor]:
        return checkpoint.to_official(self.module.state_dict())

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        checkpoint.load_into(self.module, checkpoint.from_official(state))

    def extras(self) -> dict[str, Any]:
        return {"queue_ptr": int(self.module.queue_ptr)}


class SupervisedMethod:
    """The supervised baseline: the same backbone trained with labels by cross-entropy, one view an image.

    Its checkpoint's state_dict is a plain torchvision ResNet's (fc = the classifier), which the evaluations
    read like torchvision's own ImageNet weights.
    """

    name = "supervised"
    transform = "supervised"
    needs_labels = True
    loss_scale = 1.0

    def __init__(self, cfg: ModelConfig, *, world_size: int, num_classes: int, dataset_size: int) -> None:
        self.module = getattr(torchvision.models, cfg.arch)(num_classes=num_classes)
        if cfg.shuffle_bn == "sync":
            self.module = nn.SyncBatchNorm.convert_sync_batchnorm(self.module)

    @property
    def encoder(self) -> nn.Module:
        return self.module

    def forward(self, model: nn.Module, images: Any, target: torch.Tensor,
                index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Any]:
        return model(images), target, None

    def after_step(self, state: Any) -> None:
        pass

    def has_negatives(self) -> bool:
        return True  # the other classes

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.module.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        checkpoint.load_into(self.module, state)

    def extras(self) -> dict[str, Any]:
        return {}


def split_bn_groups(cfg: ModelConfig, world_size: int) -> int:
    """The groups each BN layer of a contrastive encoder (moco, end2end, memory-bank; not the supervised
    baseline's) splits its batch into: model.bn_groups when one process emulates shuffled BN, else 1."""
    return cfg.bn_groups if cfg.shuffle_bn == "shuffle" and world_size == 1 and cfg.bn_groups > 1 else 1


def _contrastive_encoder(cfg: ModelConfig, world_size: int) -> nn.Module:
    encoder = build_encoder(cfg.arch, dim=cfg.dim, mlp=cfg.mlp)
    if cfg.shuffle_bn == "sync":
        return nn.SyncBatchNorm.convert_sync_batchnorm(encoder)
    groups = split_bn_groups(cfg, world_size)
    return split_batchnorm(encoder, groups) if groups > 1 else encoder


class _EncoderMethod:
    """What end2end and memory-bank share: ``module.encoder`` is the query encoder, saved as module.encoder_q.*."""

    module: nn.Module
    loss_scale = 1.0

    @property
    def encoder(self) -> nn.Module:
        return self.module.encoder

    def after_step(self, state: Any) -> None:
        pass

    def has_negatives(self) -> bool:
        return True  # the batch's other images (end2end: a batch of 2 or more), or the bank's sampled rows

    def state_dict(self) -> dict[str, torch.Tensor]:
        return checkpoint.to_module_names(self.module.state_dict())

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        checkpoint.load_into(self.module, checkpoint.from_module_names(state))

    def extras(self) -> dict[str, Any]:
        return {}


class EndToEndMethod(_EncoderMethod):
    """End-to-end (paper Figure 2a): the dictionary is the batch; both branches are trained by backprop."""

    name = "end2end"
    transform = "two_crops"
    needs_labels = False

    def __init__(self, cfg: ModelConfig, *, world_size: int, num_classes: int, dataset_size: int) -> None:
        self.module = EndToEnd(_contrastive_encoder(cfg, world_size), temperature=cfg.temperature,
                               shuffle_keys=cfg.shuffle_bn == "shuffle")

    def forward(self, model: nn.Module, images: Any, target: torch.Tensor,
                index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Any]:
        logits, labels = model(*images)
        return logits, labels, None


class MemoryBankMethod(_EncoderMethod):
    """Memory bank (paper Figure 2b, InstDisc): K = model.queue_size negatives sampled from the bank."""

    name = "memory-bank"
    transform = "one_crop"
    needs_labels = False

    def __init__(self, cfg: ModelConfig, *, world_size: int, num_classes: int, dataset_size: int) -> None:
        self.module = MemoryBank(_contrastive_encoder(cfg, world_size), dataset_size=dataset_size, dim=cfg.dim,
                                 num_negatives=cfg.queue_size, temperature=cfg.temperature,
                                 bank_momentum=cfg.bank_momentum)

    def forward(self, model: nn.Module, images: Any, target: torch.Tensor,
                index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Any]:
        logits, labels, features = model(images, index)
        return logits, labels, (features, index)

    def after_step(self, state: tuple[torch.Tensor, torch.Tensor]) -> None:
        self.module.update(*state)  # after the step, as InstDisc: the batch's logits used the old rows


def build_mocov3(arch: str, cfg: MocoV3Config, *, img_size: int, sync_bn: bool = False) -> MoCoV3:
    """MoCo v3 on a torchvision ResNet or a ViT (moco_core/model/vit.py), with the official heads for each: a ResNet
    starts with its residual branches' last BN at zero (zero_init_residual, as the official main_moco.py) and gets
    a 2-layer projector and a predictor without a final BN; a ViT a 3-layer projector and a final BN in the
    predictor too. ``sync_bn``: every BN, heads included, synchronised across processes (the official setting)."""
    if arch in VIT_ARCHS:
        from moco_core.model.vit import build_vit

        encoder = build_vit(arch, img_size=img_size, stop_grad_conv1=cfg.stop_grad_conv1)
        head, features, layers, predictor_bn = "head", encoder.num_features, 3, True
    else:
        encoder = getattr(torchvision.models, arch)(zero_init_residual=True)
        head, features, layers, predictor_bn = "fc", encoder.fc.in_features, 2, False
    module = MoCoV3(encoder, head_name=head, feature_dim=features, projector_layers=layers,
                    predictor_last_bn=predictor_bn, dim=cfg.dim, mlp_dim=cfg.mlp_dim, temperature=cfg.temperature,
                    momentum=cfg.momentum)
    return nn.SyncBatchNorm.convert_sync_batchnorm(module) if sync_bn else module


class MocoV3Method:
    """MoCo v3 (arXiv 2104.02057): no queue, symmetric loss over the global batch, predictor on the query side.

    Its lr and m change every step (:meth:`schedule`). BN: ``model.shuffle_bn: sync`` synchronises every BN
    across processes, as the official code; otherwise each process keeps its own (v3 shuffles nothing, and
    ``model.bn_groups`` does not apply: in one process BN sees each view's whole batch).
    """

    name = "mocov3"
    transform = "two_crops"
    needs_labels = False

    def __init__(self, cfg: ModelConfig, v3: MocoV3Config, *, img_size: int, world_size: int) -> None:
        self.config = v3
        self.module = build_mocov3(cfg.arch, v3, img_size=img_size, sync_bn=cfg.shuffle_bn == "sync")

    @property
    def encoder(self) -> nn.Module:
        """The base encoder: the backbone, its projector as fc (ResNet) or head (ViT)."""
        return self.module.encoder

    @property
    def loss_scale(self) -> float:
        return self.module.loss_scale

    def schedule(self, progress: float) -> None:
        """Set m for the step at ``progress`` (fraction of the run done): the cosine from v3.momentum to 1, or
        constant."""
        self.module.momentum = momentum_at(self.config.momentum, progress) if self.config.momentum_cos \
            else self.config.momentum

    def forward(self, model: nn.Module, images: Any, target: torch.Tensor,
                index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Any]:
        x1, x2 = images
        logits, labels = model(x1, x2)
        return logits, labels, None

    def after_step(self, state: Any) -> None:
        pass

    def has_negatives(self) -> bool:
        return True  # the batch's other images (a batch of 2 or more: check_run)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return checkpoint.to_official_v3(self.module.state_dict())

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        checkpoint.load_into(self.module, checkpoint.from_official_v3(state))

    def extras(self) -> dict[str, Any]:
        # The official main_moco.py resumes a GradScaler from 'scaler'; bf16 needs none, so this is the state of
        # a fresh one (fp16 autocast's initial scale), which lets the official script resume our checkpoints.
        return {"scaler": dict(checkpoint.FRESH_SCALER)}


Method = MocoMethod | SupervisedMethod | EndToEndMethod | MemoryBankMethod | MocoV3Method
METHODS: dict[str, type[Method]] = {"moco": MocoMethod, "supervised": SupervisedMethod, "end2end": EndToEndMethod,
                                    "memory-bank": MemoryBankMethod, "mocov3": MocoV3Method}


def build_method(cfg: PretrainConfig, *, world_size: int, num_classes: int, dataset_size: int) -> Method:
    """The method ``cfg.method`` names, built from the config sections it reads."""
    if cfg.method == "mocov3":
        return MocoV3Method(cfg.model, cfg.v3, img_size=cfg.augment.crop_size, world_size=world_size)
    return METHODS[cfg.method](cfg.model, world_size=world_size, num_classes=num_classes,  # type: ignore[call-arg]
                               dataset_size=dataset_size)
