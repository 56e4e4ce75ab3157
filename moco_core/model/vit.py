"""Vision Transformers for MoCo v3: timm's ``VisionTransformer`` with what v3 changes (arXiv 2104.02057).

timm is an optional extra (``pip install 'moco[vit]'``), imported only when a ViT is built. The model is timm's
own class, so its parameter names are timm's (and the official moco-v3 ``vits.py``'s, which subclasses it):
``timm.create_model('vit_small_patch16_224', num_heads=12)`` loads a ``vit_small`` backbone's state_dict with
only ``head.*`` missing. Attention runs through ``F.scaled_dot_product_attention`` (timm's fused attention),
so flash and memory-efficient kernels run where the device has them.

What v3 changes in timm's ViT, as the official ``vits.py`` does:

* a fixed 2-D sin-cos position embedding (not trained): for the patch at grid row ``i``, column ``j`` and
  ``omega_d = 1 / 10000^(d / (D/4))``, ``d < D/4``: ``[sin(i omega), cos(i omega), sin(j omega), cos(j omega)]``;
  zeros for the class token;
* MoCo v3's initialisation: q, k and v initialised as three separate xavier-uniform matrices, every other linear
  layer xavier-uniform, biases 0, the class token N(0, 1e-6), the patch projection xavier-uniform as the linear
  map of a 3 x p x p patch it is;
* optionally a frozen random patch projection (``stop_grad_conv1``, paper section 4.2: it removes the loss
  spikes of unstable training).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn

from moco_core.errors import UserError


@dataclass(frozen=True)
class VitShape:
    patch_size: int
    embed_dim: int
    depth: int
    num_heads: int


# ViT-S/16 with 12 heads as v3 uses (DeiT's and timm's ViT-S have 6: the parameters are the same, the attention
# is not); ViT-B/16; for 32-pixel crops, 4-pixel patches (8 x 8 of them): ViT-Ti (DeiT, arXiv 2012.12877), and
# half its width in 6 blocks (the embedded preset's: a v3 step of ViT-Ti/4 on 2 CPU cores took 5x ResNet-18's).
VIT_SHAPES = {
    "vit_small": VitShape(patch_size=16, embed_dim=384, depth=12, num_heads=12),
    "vit_base": VitShape(patch_size=16, embed_dim=768, depth=12, num_heads=12),
    "vit_tiny_p4": VitShape(patch_size=4, embed_dim=192, depth=12, num_heads=3),
    "vit_nano_p4": VitShape(patch_size=4, embed_dim=96, depth=6, num_heads=3),
}


class TimmMissingError(UserError):
    """A ViT was asked for where timm is not installed."""


def _timm() -> Any:
    try:
        from timm.models import vision_transformer
    except ImportError:
        raise TimmMissingError("ViT backbones need timm: pip install 'moco[vit]' (or pip install timm)") from None
    return vision_transformer


def sincos_position_embedding(grid: tuple[int, int], dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """The fixed 2-D sin-cos embedding of a ``grid`` (rows, columns) of patches: (rows * columns, dim), row-major.

    Row ``i``, column ``j``: ``[sin(i w), cos(i w), sin(j w), cos(j w)]`` with ``w_d = temperature^(-d / (dim/4))``
    for ``d < dim / 4`` (the official vits.py's layout; timm's ``build_sincos2d_pos_embed`` with interleaved
    sin and cos computes it).
    """
    if dim % 4:
        raise ValueError(f"a 2-D sin-cos embedding needs a width divisible by 4, got {dim}")
    from timm.layers import build_sincos2d_pos_embed

    return build_sincos2d_pos_embed(list(grid), dim=dim, temperature=temperature, interleave_sin_cos=True)


def build_vit(arch: str, *, img_size: int, num_classes: int = 0, stop_grad_conv1: bool = False) -> nn.Module:
    """timm's VisionTransformer for ``arch`` (:data:`VIT_SHAPES`) with v3's position embedding and initialisation.

    Images (N, 3, img_size, img_size) -> (N, num_classes) through ``head`` (a Linear; an identity for 0), which
    MoCo v3 replaces with its projector. The features are the class token after the last LayerNorm.
    """
    if arch not in VIT_SHAPES:
        raise ValueError(f"unknown ViT {arch!r}; expected one of {list(VIT_SHAPES)}")
    shape = VIT_SHAPES[arch]
    if img_size % shape.patch_size:
        raise UserError(f"{arch}: crops of {img_size} pixels are not a whole number of {shape.patch_size}-pixel "
                        f"patches")
    timm_vit = _timm()
    # weight_init "moco": timm's copy of v3's initialisation of the linear layers (q, k, v as three matrices).
    model = timm_vit.VisionTransformer(
        img_size=img_size, patch_size=shape.patch_size, embed_dim=shape.embed_dim, depth=shape.depth,
        num_heads=shape.num_heads, mlp_ratio=4.0, qkv_bias=True, num_classes=num_classes, global_pool="token",
        norm_layer=partial(nn.LayerNorm, eps=1e-6), weight_init="moco")
    grid = model.patch_embed.grid_size
    pos = sincos_position_embedding(tuple(grid), shape.embed_dim)
    # Fixed, not learned: a parameter (so the state_dict holds it, as timm's and the official checkpoints do)
    # that no optimizer moves.
    model.pos_embed = nn.Parameter(torch.cat([torch.zeros(1, shape.embed_dim), pos])[None], requires_grad=False)
    nn.init.normal_(model.cls_token, std=1e-6)
    proj = model.patch_embed.proj
    bound = math.sqrt(6.0 / float(3 * shape.patch_size ** 2 + shape.embed_dim))  # xavier-uniform of the patch map
    nn.init.uniform_(proj.weight, -bound, bound)
    nn.init.zeros_(proj.bias)
    if stop_grad_conv1:
        proj.weight.requires_grad_(False)
        proj.bias.requires_grad_(False)
    return model


def is_vit(module: nn.Module) -> bool:
    """Whether ``module`` is a ViT backbone (its classifier is ``head``; a ResNet's is ``fc``)."""
    return hasattr(module, "patch_embed") and hasattr(module, "head")


def classifier_name(module: nn.Module) -> str:
    """The attribute holding a backbone's last layer: ``head`` for a ViT, ``fc`` for a ResNet."""
    return "head" if is_vit(module) else "fc"
