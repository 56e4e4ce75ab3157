"""What a reader finds in a file: the backbone's tensors under torchvision's ResNet names or timm's ViT names, and
what the file itself says (its method, the encoder read, its normalisation), or the methods it could be of."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from moco_core.model.vit import VitSpec
from moco_core.model.weights.formats import Normalisation


@dataclass
class Found:
    """One file's backbone, as a reader recognised it from its keys and shapes.

    ``state``: a ResNet's tensors under torchvision's names without ``fc``, or a ViT's under timm's without
    ``head`` (``vit`` set). ``method``: the method the file states (by a field, or by a layout only that method's
    code writes); None where the layout is shared, and then ``candidates`` are the methods whose released weights
    come in it (the refusal lists them). ``encoder``: the network read where the layout holds several (a DINO
    checkpoint's teacher); None for the method's usual one. ``normalisation``: where the file (or the codebase that
    wrote it) fixes the input statistics; None for the method's. ``facts``: the record's pretraining facts (epochs,
    config, code version of our checkpoints).
    """

    layout: str  # the record's backbone.format: "moco-suite", "dino-full", "timm-safetensors", ...
    description: str  # the layout in a few words, for messages: "a DINO full checkpoint (teacher and student)"
    state: dict[str, torch.Tensor]
    method: str | None = None
    candidates: tuple[str, ...] = ()
    encoder: str | None = None
    normalisation: Normalisation | None = None
    vit: VitSpec | None = None
    stem: str = "imagenet"  # a ResNet's stem: "imagenet" (7x7 conv, max-pool) or "cifar" (3x3 conv stride 1, none)
    facts: dict[str, Any] = field(default_factory=dict)
    # the methods that may be named on this layout (--weights-format); None: any method of the backbone's family
    allowed: tuple[str, ...] | None = None


def strip(state: dict[str, Any], prefix: str, *, drop: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """The tensors of ``state`` under ``prefix``, prefix removed, less those then starting with one of ``drop``."""
    return {k[len(prefix):]: v for k, v in state.items() if isinstance(k, str) and k.startswith(prefix)
            and isinstance(v, torch.Tensor) and not k[len(prefix):].startswith(drop)}


def has_prefix(state: Any, prefix: str) -> bool:
    return isinstance(state, dict) and any(isinstance(k, str) and k.startswith(prefix) for k in state)
