"""Backbones under a library's plain names, which any method's weights may come in and which therefore say
nothing of the method: ``--weights-format`` names it.

- A flat torchvision ResNet state dict (with or without ``fc``): torchvision's supervised weights, and DINO's,
  Barlow Twins' (hub), BYOL's (converted from its JAX pickle, e.g. by ssl-transfer's ``convert_byol``) backbones.
- The same under ``state_dict`` (SimCLR v1 as tonylins/simclr-converter writes it; any wrapper of the kind).
- A flat timm ViT state dict without ``head``: DINO's backbone-only ViTs, MoCo v3's converted ones
  (``moco convert --to timm``), timm's own ``.pth`` files.
- A flat torchvision ViT state dict (``class_token``, ``conv_proj``, ``encoder.layers.*``): torchvision's
  supervised ViTs.
"""

from __future__ import annotations

from typing import Any

from moco_core.model.weights import resnet_names, vit_names
from moco_core.model.weights.files import WeightsFile, tensors_only
from moco_core.model.weights.formats import METHODS
from moco_core.model.weights.layout import Found

# Any method whose weights come in that family may have written a plain file (``moco convert --to torchvision``
# writes our own MoCo and MoCo v3 so), so the candidates are generated from the methods that exist
RESNET_CANDIDATES = tuple(m.name for m in METHODS.values() if "resnet" in m.families)
VIT_CANDIDATES = tuple(m.name for m in METHODS.values() if "vit" in m.families)


def read(weights: WeightsFile) -> Found | None:
    obj = weights.obj
    flat = tensors_only(obj)
    if len(flat) == len(obj):  # every entry a tensor: a bare state dict
        return from_state(flat, "")
    wrapped = obj.get("state_dict")
    if isinstance(wrapped, dict) and set(obj) <= {"state_dict", "epoch", "arch"}:
        return from_state(tensors_only(wrapped), " under 'state_dict'")
    return None


def from_state(state: dict[str, Any], where: str) -> Found | None:
    """A plain ResNet or ViT of ``state``; ``where`` says how the file wraps it (for messages)."""
    if resnet_names.is_resnet(state):
        fc = " with fc" if "fc.weight" in state else " without fc"
        return Found("torchvision", f"a torchvision ResNet state dict{fc}{where}",
                     resnet_names.without_fc(state), candidates=RESNET_CANDIDATES)
    if vit_names.is_timm_vit(state) and not any(k.startswith("head.") for k in state):
        return Found("timm-vit", f"a timm ViT state dict{where}", state,
                     vit=vit_names.vit_spec(state), candidates=VIT_CANDIDATES)
    if "class_token" in state and "conv_proj.weight" in state:
        timm_state = vit_names.from_torchvision_vit(state)
        return Found("torchvision-vit", f"a torchvision ViT state dict{where}", timm_state,
                     vit=vit_names.vit_spec(timm_state), candidates=VIT_CANDIDATES)
    return None
