"""DINOv2's files (facebookresearch/dinov2, arXiv 2304.07193), read into timm's ViT (timm's DINOv2 models are the
same network): see :func:`moco_core.model.weights.vit_names.from_dinov2` for the names.

- Hub files ``dinov2_vit{s,b,l,g}14[_reg4]_pretrain.pth``: the backbone as a flat state dict, with ``mask_token``
  and layer scale (``blocks.N.ls1.gamma``), registers in the ``_reg4`` ones, a SwiGLU MLP in ViT-g's.
- Training files: ``{'teacher': {backbone.*, dino_head.*, ibot_head.*}}`` (the teacher the evaluations read),
  blocks possibly chunked (``blocks.C.N.*``).

``mask_token`` with layer scale in one ViT is this code's layout (DINOv2's ``DinoVisionTransformer``): the file
states the method. The position embedding is for 518-pixel crops (37 x 37 patches of 14) and is resampled to
the crops evaluated (timm's ``dynamic_img_size``).
"""

from __future__ import annotations

from typing import Any

import torch

from moco_core.model.weights import vit_names
from moco_core.model.weights.files import WeightsFile
from moco_core.model.weights.layout import Found, has_prefix, strip


def is_dinov2(state: dict[str, Any]) -> bool:
    """DINOv2's ViT: a mask token and layer scale (in a first block, chunked or not)."""
    return "mask_token" in state and "cls_token" in state and any(
        k.endswith(".ls1.gamma") for k in state if isinstance(k, str))


def read(weights: WeightsFile) -> Found | None:
    obj = weights.obj
    teacher = obj.get("teacher")
    if isinstance(teacher, dict) and has_prefix(teacher, "backbone."):
        state, layout, what = strip(teacher, "backbone."), "dinov2-train", "a DINOv2 training checkpoint (teacher)"
    else:
        state, layout, what = obj, "dinov2-hub", "a DINOv2 backbone (hub file)"
    if not is_dinov2(state):
        return None
    return from_names(state, layout, what)


def from_names(state: dict[str, torch.Tensor], layout: str, what: str, *, heads: int | None = None,
               norm_eps: float = 1e-6) -> Found:
    """A Found of DINOv2 tensors under its own names (also what transformers' Dinov2Model maps to)."""
    timm_state = vit_names.from_dinov2({k: v for k, v in state.items() if isinstance(v, torch.Tensor)})
    spec = vit_names.vit_spec(timm_state, heads=heads, norm_eps=norm_eps, dynamic=True)
    return Found(layout, what, timm_state, method="dinov2", encoder="teacher", vit=spec)
