"""Backbones for evaluation: the network a weights file holds (of any format
:mod:`moco_core.model.weights` reads), or random init, with a new classifier.

The format is detected from the file, never from its name; every file is read without running code in it. What
was read (the method, the encoder, the input normalisation, the arch, the file's SHA-256) is the
:class:`BackboneInfo` every result record keeps, and the normalisation is what every evaluation feeds the
network (:func:`input_normalisation`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import nn

from moco_core import checkpoint
from moco_core.config import ARCHS
from moco_core.errors import UserError
from moco_core.model.vit import VIT_SHAPES, build_vit, build_vit_spec
from moco_core.model.weights import detect
from moco_core.model.weights.detect import Weights, file_sha256, read_weights
from moco_core.model.weights.formats import IMAGENET, Normalisation
from moco_core.model.weights.resnet_names import CIFAR_SUFFIX, infer_arch

__all__ = ["BackboneInfo", "build_resnet", "file_sha256", "infer_arch", "input_normalisation", "load_backbone",
           "load_resnet", "read", "read_backbone_state", "reread_state"]
QUERY_PREFIX = checkpoint.QUERY_PREFIX
BASE_PREFIX = checkpoint.BASE_PREFIX


@dataclass(frozen=True)
class BackboneInfo:
    """Where the weights came from and what they are, for the result record (its ``backbone`` section)."""

    source: str  # the path, or "random"
    format: str  # the layout read: "moco-suite", "official-moco", "torchvision", "dino-full", ..., "random"
    arch: str
    sha256: str | None  # of the file, so results trace to the exact weights
    # method and who named it (stated_by: "file" or "--weights-format"); epochs (completed: the checkpoint's
    # "epoch"), partial_epoch_steps, config of our checkpoints; what is known otherwise
    pretrain: dict[str, Any]
    encoder: str = "backbone"  # the network read: query, teacher, online, encoder, backbone ("none" for random)
    normalisation: dict[str, Any] = field(default_factory=IMAGENET.record)  # the input statistics fed to it
    model: dict[str, Any] = field(default_factory=dict)  # a ViT's shape, a ResNet's stem


def read(source: str, weights_format: str | None = None) -> Weights | None:
    """The weights of ``source`` (a file, a run directory), or None for "random"."""
    return None if source == "random" else read_weights(source, weights_format)


def input_normalisation(weights: Weights | None) -> Normalisation:
    """The normalisation an evaluation feeds the backbone: the weights' (their method's, or what the file states);
    torchvision's ImageNet statistics for random init."""
    return IMAGENET if weights is None else weights.normalisation


def read_backbone_state(path: Path, weights_format: str | None = None
                        ) -> tuple[dict[str, torch.Tensor], str, dict[str, Any]]:
    """(backbone tensors: torchvision ResNet names without fc, or timm ViT names without head; layout; the record's
    pretraining facts) of a file of any format read here."""
    weights = read_weights(path, weights_format)
    return weights.state, weights.found.layout, detect.pretrain_facts(weights)


def reread_state(info: BackboneInfo) -> dict[str, torch.Tensor]:
    """The backbone tensors of the file ``info`` describes, read again as they were (the method the user named,
    where the file does not say): what the linear protocol's sanity check compares against."""
    named = info.pretrain.get("method") if info.pretrain.get("stated_by") == detect.OPTION else None
    return read_weights(info.source, named).state


def info_of(weights: Weights) -> BackboneInfo:
    found = weights.found
    model = found.vit.record() if found.vit is not None else {
        "family": "resnet", "stem": "cifar" if weights.arch.endswith(CIFAR_SUFFIX) else "imagenet"}
    return BackboneInfo(str(weights.path), found.layout, weights.arch, weights.sha256,
                        detect.pretrain_facts(weights), weights.encoder, weights.normalisation.record(), model)


def _random_info(arch: str) -> BackboneInfo:
    return BackboneInfo("random", "random", arch, None, {"method": "random init"}, "none", IMAGENET.record(),
                        {"family": "vit" if arch in VIT_SHAPES else "resnet"})


def build_resnet(arch: str, num_classes: int) -> torchvision.models.ResNet:
    """torchvision's ResNet ``arch``; ``<arch>_cifar``: with the CIFAR stem (3x3 conv1 of stride 1, no max-pool)."""
    model = getattr(torchvision.models, arch.removesuffix(CIFAR_SUFFIX))(num_classes=num_classes)
    if arch.endswith(CIFAR_SUFFIX):
        model.conv1 = nn.Conv2d(3, model.conv1.out_channels, kernel_size=3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    return model


def load_resnet(source: str | Weights | None, *, arch: str | None = None, num_classes: int = 1000,
                arch_option: str = "--arch", weights_format: str | None = None,
                cifar_stem: bool = False) -> tuple[torchvision.models.ResNet, BackboneInfo]:
    """A torchvision ResNet holding ``source``'s weights (a path of any format read here, weights already read,
    or "random"/None).

    ``arch`` is the ResNet asked for (the file must hold it; "random" needs it), named in errors as
    ``arch_option``. Loading must leave exactly fc.weight and fc.bias missing (the check of the official
    main_lincls.py); anything else fails with a one-line CheckpointError. fc keeps torchvision's initialisation.
    ``cifar_stem``: whether a CIFAR-stem ResNet may be returned (the detection and segmentation networks need
    the ImageNet stem's strides).
    """
    if source == "random" or source is None:
        if arch is None:
            also = f" ({arch_option})" if arch_option != "--arch" else ""
            raise checkpoint.CheckpointError(f"'random' needs the ResNet to initialise: pass --arch{also}")
        if arch.removesuffix(CIFAR_SUFFIX) not in ARCHS or (arch.endswith(CIFAR_SUFFIX) and not cifar_stem):
            raise checkpoint.CheckpointError(f"unknown arch {arch!r}; expected one of {list(ARCHS)} (a classification "
                                             f"also <arch>{CIFAR_SUFFIX}; where a ViT can be evaluated, "
                                             f"{list(VIT_SHAPES)})")
        return build_resnet(arch, num_classes), _random_info(arch)
    weights = source if isinstance(source, Weights) else read_weights(source, weights_format)
    if weights.found.vit is not None:
        raise checkpoint.CheckpointError(f"{weights.path}: holds a ViT ({weights.arch}), not a ResNet: this command "
                                         f"takes ResNets only")
    if weights.arch.endswith(CIFAR_SUFFIX) and not cifar_stem:
        raise checkpoint.CheckpointError(f"{weights.path}: holds a CIFAR-stem ResNet ({weights.arch}: 3x3 conv1 of "
                                         f"stride 1, no max-pool), whose strides this network does not take")
    return _resnet(weights, arch=arch, num_classes=num_classes, arch_option=arch_option)


def _resnet(weights: Weights, *, arch: str | None, num_classes: int,
            arch_option: str = "--arch") -> tuple[torchvision.models.ResNet, BackboneInfo]:
    if arch is not None and arch != weights.arch:
        raise checkpoint.CheckpointError(f"{weights.path}: holds {weights.arch} weights, but {arch_option} {arch} "
                                         f"was asked for")
    model = build_resnet(weights.arch, num_classes)
    _load_all_but_head(model, weights, "fc")
    return model, info_of(weights)


def _load_all_but_head(model: nn.Module, weights: Weights, head: str) -> None:
    """Load the weights into ``model``: every tensor but ``<head>.weight`` and ``<head>.bias`` (the new
    classifier), with the same shapes, nothing more; a one-line CheckpointError names the first that differ."""
    expected = {k: v for k, v in model.state_dict().items() if k not in (f"{head}.weight", f"{head}.bias")}
    problem = checkpoint.state_mismatch(expected, weights.state)
    if problem:
        raise checkpoint.CheckpointError(f"{weights.path}: not a complete {weights.arch} backbone "
                                         f"({weights.found.description}): {problem}")
    model.load_state_dict(weights.state, strict=False)


def _vit(weights: Weights, *, num_classes: int, arch: str | None) -> nn.Module:
    """A ViT (timm's, of the weights' shape) holding ``weights``, with a new ``head`` for ``num_classes``."""
    spec = weights.found.vit
    assert spec is not None
    if arch is not None and arch != weights.arch:
        raise checkpoint.CheckpointError(f"{weights.path}: holds {weights.arch} weights, but --arch {arch} was asked "
                                         f"for")
    model = build_vit_spec(spec, num_classes=num_classes)
    _load_all_but_head(model, weights, "head")
    return model


def load_backbone(source: str | Weights | None, num_classes: int, *, arch: str | None = None,
                  crop_size: int | None = None, crop_option: str = "--crop-size {}",
                  weights_format: str | None = None) -> tuple[nn.Module, BackboneInfo]:
    """:func:`load_resnet` (or, for a ViT's weights or a random ViT ``arch``, a timm ViT) with a new fc or head
    (N(0, 0.01), bias 0) for ``num_classes``, as main_lincls.py.

    ``source``: a path, weights already read (:func:`read`), or "random"/None. ``crop_size``: the crops the
    evaluation feeds it. A random ViT is built for them; a ViT from a file takes the crops it was trained at (its
    position embedding is for that grid of patches; DINOv2's is resampled to any multiple of its patch), and other
    crops stop with one line with ``crop_option`` (a template of the option that sets them) filled in."""
    if (source == "random" or source is None) and arch in VIT_SHAPES:
        model: nn.Module = build_vit(arch, img_size=crop_size or 224, num_classes=num_classes)
        info = _random_info(arch)
        head = model.head
    elif source == "random" or source is None:  # a CIFAR stem's random init too: the floor of solo-learn's rows
        model, info = load_resnet(None, arch=arch, num_classes=num_classes, cifar_stem=True)
        head = model.fc
    else:
        weights = source if isinstance(source, Weights) else read_weights(source, weights_format)
        spec = weights.found.vit
        if spec is not None:
            _check_crop(weights, crop_size, crop_option)
            model, info = _vit(weights, num_classes=num_classes, arch=arch), info_of(weights)
            head = model.head
        else:
            model, info = _resnet(weights, arch=arch, num_classes=num_classes)
            head = model.fc
    nn.init.normal_(head.weight, mean=0.0, std=0.01)
    nn.init.zeros_(head.bias)
    return model, info


def _check_crop(weights: Weights, crop_size: int | None, crop_option: str) -> None:
    spec = weights.found.vit
    assert spec is not None
    if crop_size is None:
        return
    if spec.dynamic and crop_size % spec.patch_size:
        fits = max(spec.patch_size, round(crop_size / spec.patch_size) * spec.patch_size)
        raise UserError(f"{weights.given or weights.path}: its ViT ({weights.arch}) takes crops of a whole number of "
                        f"{spec.patch_size}-px patches, not {crop_size}; evaluate it with {crop_option.format(fits)}")
    if not spec.dynamic and crop_size != spec.img_size:
        raise UserError(f"{weights.given or weights.path}: its ViT ({weights.arch}) takes {spec.img_size}-px crops, "
                        f"not {crop_size}; "
                        f"evaluate it with {crop_option.format(spec.img_size)}")
