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


def named_shape(patch_size: int, embed_dim: int, depth: int) -> tuple[str, VitShape] | None:
    """The shape of VIT_SHAPES with this patch, width and depth, and its name; None for any other."""
    return next(((name, s) for name, s in VIT_SHAPES.items() if (s.patch_size, s.embed_dim, s.depth)
                 == (patch_size, embed_dim, depth)), None)


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


# The number of heads is not in a ViT's weights. By width, the heads of the standard shapes (ViT-Ti/S/B/L/H of
# arXiv 2010.11929 and DeiT, DINOv2's ViT-g of arXiv 2304.07193); MoCo v3's own ViTs are VIT_SHAPES' (ViT-S: 12).
STANDARD_HEADS = {96: 3, 192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16, 1536: 24}
# (width, depth) -> the size's name, for ViTs that are none of VIT_SHAPES (arch "vit_<size>" at 16-pixel patches,
# "vit_<size>_p<patch>" at others: DINOv2's ViT-S/14 is vit_small_p14).
VIT_SIZES = {(192, 12): "tiny", (384, 12): "small", (768, 12): "base", (1024, 24): "large", (1280, 32): "huge",
             (1536, 40): "giant"}

# The largest ViT built from a file's dimensions: the standard shapes' with room (DINOv2's ViT-g/14: 40 blocks of
# width 1536, 37 x 37 patches of its 518-pixel crops, 4 registers; patches of 4 to 32 pixels). Checked before the
# network is built: one key blocks.99999999.* in a file asked for 10^8 blocks, and the allocation died at 7 GB.
VIT_LIMITS = {"depth": 48, "embed_dim": 2048, "patch_size": 32, "grid": 64, "reg_tokens": 16}
MLP_RATIO_LIMIT = 8  # MLP width / embedding width (ViT-g's SwiGLU packs 2 x 4096 for 1536: 5.3)


@dataclass(frozen=True)
class VitSpec:
    """A ViT as its weights and their format describe it: timm's ``VisionTransformer`` arguments.

    ``no_embed_class``: the position embedding covers the patches only (timm's layout of DINOv2 with registers,
    whose class token then holds its own position embedding). ``dynamic``: the position embedding is resampled to
    the grid of every input (DINOv2's, trained at 518 px and evaluated at 224). ``fixed_position``: MoCo v3's
    sin-cos embedding, not trained in fine-tuning."""

    patch_size: int
    embed_dim: int
    depth: int
    num_heads: int
    grid: int  # patches per side of the position embedding: the crop it was trained at is grid * patch_size
    mlp_hidden: int
    swiglu: bool = False  # DINOv2's ViT-g: SiLU(x W1) * (x W2), W1 and W2 packed in one fc1
    qkv_bias: bool = True
    layer_scale: bool = False  # ls1.gamma, ls2.gamma (DINOv2)
    reg_tokens: int = 0
    no_embed_class: bool = False
    norm_eps: float = 1e-6
    dynamic: bool = False
    fixed_position: bool = False

    @property
    def img_size(self) -> int:
        return self.grid * self.patch_size

    @property
    def least_parameters(self) -> int:
        """The values its blocks' matrices hold (q, k, v, the projection, the MLP's two layers): fewer than the
        network's, so a file holding fewer values cannot fill it."""
        fc2_in = self.mlp_hidden // 2 if self.swiglu else self.mlp_hidden  # SwiGLU's fc1 packs two halves
        return self.depth * self.embed_dim * (4 * self.embed_dim + self.mlp_hidden + fc2_in)

    def beyond_limits(self) -> str | None:
        """What in this shape is past :data:`VIT_LIMITS` (or is no shape at all), in words; None when it fits."""
        for name, limit in VIT_LIMITS.items():
            value, least = getattr(self, name), 0 if name == "reg_tokens" else 1
            if not least <= value <= limit:
                return f"{name.replace('_', ' ')} {value} (from {least} to {limit}: the largest ViT's with room)"
        if not 1 <= self.mlp_hidden <= MLP_RATIO_LIMIT * self.embed_dim:
            return f"an MLP of {self.mlp_hidden} (at most {MLP_RATIO_LIMIT}x the width {self.embed_dim})"
        if not 1 <= self.num_heads <= self.embed_dim or self.embed_dim % self.num_heads:
            return f"{self.num_heads} heads (a divisor of the width {self.embed_dim})"
        return None

    @property
    def arch(self) -> str:
        """Our name of the shape: one of VIT_SHAPES, else ``vit_<size>[_p<patch>]``."""
        named = named_shape(self.patch_size, self.embed_dim, self.depth)
        if named is not None:
            return named[0]
        size = VIT_SIZES.get((self.embed_dim, self.depth), f"w{self.embed_dim}_d{self.depth}")
        return f"vit_{size}" + ("" if self.patch_size == 16 else f"_p{self.patch_size}")

    def record(self) -> dict[str, Any]:
        """The record's ``backbone.model``."""
        return {"family": "vit", "patch_size": self.patch_size, "embed_dim": self.embed_dim, "depth": self.depth,
                "num_heads": self.num_heads, "mlp": "swiglu" if self.swiglu else "gelu",
                "mlp_hidden": self.mlp_hidden, "layer_scale": self.layer_scale, "registers": self.reg_tokens,
                "trained_crop": self.img_size, "position": "resampled" if self.dynamic else "fixed grid"}


def _mlp_layer(hidden: int, swiglu: bool) -> Any:
    """timm's Block builds its MLP with ``hidden_features=int(dim * mlp_ratio)``: the width the weights hold is
    passed here instead, exactly (a ratio such as ViT-g's 8192 / 1536 does not survive the float round trip)."""
    from timm.layers import GluMlp, Mlp

    def build(in_features: int, hidden_features: int, **kwargs: Any) -> nn.Module:
        if swiglu:  # DINOv2's SwiGLUFFN: the first half of fc1's output is gated by SiLU, times the second half
            kwargs["act_layer"] = nn.SiLU
            return GluMlp(in_features, hidden, gate_last=False, **kwargs)
        return Mlp(in_features, hidden, **kwargs)

    return build


def build_vit_spec(spec: VitSpec, *, num_classes: int = 0) -> nn.Module:
    """timm's VisionTransformer of ``spec`` (class-token features after the last norm, a Linear ``head`` for
    ``num_classes``), weights untouched: the caller loads them. Input crops: ``spec.img_size``, or any multiple of
    the patch size where ``spec.dynamic``; a shape past :data:`VIT_LIMITS` is refused before anything is built."""
    problem = spec.beyond_limits()
    if problem is not None:
        raise UserError(f"a ViT of {problem} is not built")
    timm_vit = _timm()
    model = timm_vit.VisionTransformer(
        img_size=spec.img_size, patch_size=spec.patch_size, embed_dim=spec.embed_dim, depth=spec.depth,
        num_heads=spec.num_heads, qkv_bias=spec.qkv_bias, num_classes=num_classes, global_pool="token",
        init_values=1e-5 if spec.layer_scale else None, reg_tokens=spec.reg_tokens,
        no_embed_class=spec.no_embed_class, dynamic_img_size=spec.dynamic,
        norm_layer=partial(nn.LayerNorm, eps=spec.norm_eps), mlp_layer=_mlp_layer(spec.mlp_hidden, spec.swiglu))
    if spec.fixed_position:  # MoCo v3's sin-cos embedding (build_vit): loaded, never trained
        model.pos_embed.requires_grad_(False)
    return model
