"""ViTs under timm's names (``cls_token``, ``pos_embed``, ``patch_embed.proj``, ``blocks.N.{norm1, attn.qkv,
attn.proj, ls1.gamma, norm2, mlp.fc1, mlp.fc2, ls2.gamma}``, ``norm``): their shape read from the tensors, and the
other codebases' names mapped to them.

- DINOv2 (facebookresearch/dinov2 ``DinoVisionTransformer``): timm's names plus ``mask_token`` (masked-image
  modelling's, unused by a backbone), ``register_tokens``, chunked blocks ``blocks.C.N.*`` (N global: a chunk
  keeps the index of each block it holds), and for ViT-g the SwiGLU ``mlp.w12`` (both halves packed) and ``mlp.w3``.
  Registers become timm's ``reg_token`` with ``no_embed_class``: the position embedding then covers the patches only
  and the class token takes its own position embedding in (the same sum, done once).
- torchvision's ``VisionTransformer``: ``class_token``, ``conv_proj``, ``encoder.pos_embedding``,
  ``encoder.layers.encoder_layer_N.{ln_1, self_attention.in_proj_*, self_attention.out_proj, ln_2, mlp.0, mlp.3}``.
- Hugging Face transformers' ``ViTModel`` and ``Dinov2Model``: ``embeddings.*``, ``encoder.layer.N.attention.
  attention.{query,key,value}`` (q, k, v as three matrices: stacked in that order, timm's qkv), ``layernorm``.
"""

from __future__ import annotations

import math
import re

import torch

from moco_core import checkpoint
from moco_core.model.vit import STANDARD_HEADS, VitSpec, named_shape

_CHUNKED = re.compile(r"blocks\.([0-9]+)\.([0-9]+)\.(.+)")


def is_timm_vit(state: dict[str, torch.Tensor]) -> bool:
    return "patch_embed.proj.weight" in state and "pos_embed" in state and "cls_token" in state


_BLOCK_NUMBER = re.compile(r"0|[1-9][0-9]{0,8}")  # ASCII digits (re's \d takes any script's), no leading zeros


def depth_of(state: dict[str, torch.Tensor]) -> int:
    """The number of blocks of timm-named ``state``, read from its keys ``blocks.N.*``: N numbered 0 to depth - 1
    in a row, each block with the same names under it as block 0. Anything else is refused before a network is
    built of it (one extra key ``blocks.99999999.norm1.weight`` asked for 10^8 blocks); shapes that differ are
    the strict load's to name."""
    blocks: dict[int, set[str]] = {}
    for key in state:
        if not key.startswith("blocks."):
            continue
        number, _, rest = key[len("blocks."):].partition(".")
        if not _BLOCK_NUMBER.fullmatch(number) or not rest:
            raise checkpoint.CheckpointError(f"key {key[:80]!r}: {number[:20]!r} is no block number (0, 1, 2...)")
        blocks.setdefault(int(number), set()).add(rest)
    depth = len(blocks)
    if set(blocks) != set(range(depth)):
        gap = next(n for n in range(depth) if n not in blocks)
        raise checkpoint.CheckpointError(f"its {depth} blocks are numbered {_numbers(sorted(blocks))}, not 0 to "
                                         f"{depth - 1} in a row (block {gap} is missing)")
    first = blocks.get(0, set())
    for n, names in sorted(blocks.items()):
        if names != first:
            lacks, more = sorted(first - names), sorted(names - first)
            said = f"lacks blocks.{n}.{lacks[0]}" if lacks else f"has blocks.{n}.{more[0]}, which block 0 has not"
            raise checkpoint.CheckpointError(f"block {n} {said} ({len(lacks) + len(more)} names differ): every block "
                                             f"of a ViT has the same tensors")
    return depth


def _numbers(numbers: list[int]) -> str:
    shown = ", ".join(map(str, numbers[:4]))
    return shown + (f", ... {numbers[-1]}" if len(numbers) > 4 else "")


_DIMS = {"patch_embed.proj.weight": 4, "pos_embed": 3, "reg_token": 3, "blocks.0.mlp.fc1.weight": 2,
         "blocks.0.mlp.fc2.weight": 2}


def vit_spec(state: dict[str, torch.Tensor], *, heads: int | None = None, norm_eps: float = 1e-6,
             dynamic: bool = False, fixed_position: bool = False) -> VitSpec:
    """The shape of a timm-named ViT from its tensors; ``heads`` (not in the weights) defaults to the standard
    shape's of that width (:data:`moco_core.model.vit.STANDARD_HEADS`)."""
    for key, dims in _DIMS.items():  # the shapes read below, with the number of dimensions they are read from
        if key in state and state[key].dim() != dims:
            raise checkpoint.CheckpointError(f"its {key} has shape {list(state[key].shape)}: a ViT's has {dims} "
                                             f"dimensions")
    proj, pos = state["patch_embed.proj.weight"], state["pos_embed"]
    width, patch, depth = proj.shape[0], proj.shape[-1], depth_of(state)
    reg = state["reg_token"].shape[1] if "reg_token" in state else 0
    no_embed_class = reg > 0  # how vit_names lays out registers (from_dinov2), as timm's DINOv2 models
    patches = pos.shape[1] - (0 if no_embed_class else 1)
    grid = math.isqrt(patches)
    if grid * grid != patches:
        raise checkpoint.CheckpointError(f"a ViT position embedding of {pos.shape[1]} tokens is no square grid of "
                                         f"patches (and a class token)")
    fc1, fc2 = state.get("blocks.0.mlp.fc1.weight"), state.get("blocks.0.mlp.fc2.weight")
    # SwiGLU (DINOv2's ViT-g): fc1 packs the two halves, so it is twice as wide as what fc2 takes
    swiglu = fc1 is not None and fc2 is not None and fc1.shape[0] == 2 * fc2.shape[1]
    if heads is None and width not in STANDARD_HEADS:
        raise checkpoint.CheckpointError(f"a ViT of width {width}: its number of heads is not in the weights and "
                                         f"no standard ViT has that width ({sorted(STANDARD_HEADS)})")
    spec = VitSpec(patch_size=patch, embed_dim=width, depth=depth, num_heads=heads or STANDARD_HEADS[width],
                   grid=grid, mlp_hidden=fc1.shape[0] if fc1 is not None else 4 * width, swiglu=swiglu,
                   qkv_bias="blocks.0.attn.qkv.bias" in state, layer_scale="blocks.0.ls1.gamma" in state,
                   reg_tokens=reg, no_embed_class=no_embed_class, norm_eps=norm_eps, dynamic=dynamic,
                   fixed_position=fixed_position)
    problem = spec.beyond_limits()
    if problem is not None:
        raise checkpoint.CheckpointError(f"its ViT has {problem}; not built")
    held = sum(t.numel() for t in state.values())
    if spec.least_parameters > held:
        raise checkpoint.CheckpointError(f"its ViT ({depth} blocks of width {width}, an MLP of {spec.mlp_hidden}) "
                                         f"needs at least {spec.least_parameters} weights, and its tensors hold "
                                         f"{held}: not built")
    return spec


def mocov3_heads(state: dict[str, torch.Tensor]) -> int | None:
    """MoCo v3's heads for its ViT shapes (ViT-S: 12, not the standard 6), by patch, width and depth."""
    proj = state["patch_embed.proj.weight"]
    if proj.dim() != _DIMS["patch_embed.proj.weight"]:
        return None  # vit_spec names it
    named = named_shape(proj.shape[-1], proj.shape[0], depth_of(state))
    return named[1].num_heads if named is not None else None


def from_dinov2(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """DINOv2's backbone names to timm's (see the module docstring); ``mask_token`` left out. SwiGLU's ``w12`` and
    ``w3`` become timm's GluMlp ``fc1`` and ``fc2`` (:func:`vit_spec` tells it by fc1's width)."""
    out: dict[str, torch.Tensor] = {}
    for given, value in state.items():
        chunked = _CHUNKED.fullmatch(given)
        key = f"blocks.{chunked.group(2)}.{chunked.group(3)}" if chunked else given
        if key == "mask_token":
            continue
        key = key.replace(".mlp.w12.", ".mlp.fc1.").replace(".mlp.w3.", ".mlp.fc2.")
        if key in out:  # the same block in two chunks, or chunked and not: which one is the network's?
            raise checkpoint.CheckpointError(f"{given!r} and another key are both {key!r}: a block is in two "
                                             f"chunks (blocks.C.N: each block N in one chunk C)")
        out[key] = value
    if "register_tokens" in out:  # cls, registers, patches; the position embedding of the cls and the patches
        pos = out.pop("pos_embed")
        out["cls_token"] = out["cls_token"] + pos[:, :1]
        out["pos_embed"] = pos[:, 1:]
        out["reg_token"] = out.pop("register_tokens")
    return out


def from_torchvision_vit(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """torchvision's ViT names to timm's, ``heads.*`` left out (both names of its MLP: ``mlp.0``/``mlp.3`` and the
    older ``mlp.linear_1``/``mlp.linear_2``)."""
    out: dict[str, torch.Tensor] = {}
    layer = re.compile(r"encoder\.layers\.encoder_layer_(\d+)\.(.+)")
    names = {"ln_1.": "norm1.", "ln_2.": "norm2.", "self_attention.out_proj.": "attn.proj.", "mlp.0.": "mlp.fc1.",
             "mlp.3.": "mlp.fc2.", "mlp.linear_1.": "mlp.fc1.", "mlp.linear_2.": "mlp.fc2."}
    for key, value in state.items():
        if key.startswith("heads."):
            continue
        if key == "class_token":
            out["cls_token"] = value
        elif key.startswith("conv_proj."):
            out["patch_embed.proj." + key[len("conv_proj."):]] = value
        elif key == "encoder.pos_embedding":
            out["pos_embed"] = value
        elif key.startswith("encoder.ln."):
            out["norm." + key[len("encoder.ln."):]] = value
        elif (match := layer.fullmatch(key)) is not None:
            n, rest = match.groups()
            if rest.startswith("self_attention.in_proj_"):
                new = "attn.qkv." + rest[len("self_attention.in_proj_"):]
            else:
                new = next((theirs + rest[len(ours):] for ours, theirs in names.items() if rest.startswith(ours)), rest)
            out[f"blocks.{n}.{new}"] = value
        else:
            out[key] = value  # unknown: the strict load names it
    return out


_HF_LAYER = re.compile(r"encoder\.layer\.(\d+)\.(.+)")
_HF_NAMES = {"layernorm_before.": "norm1.", "layernorm_after.": "norm2.", "norm1.": "norm1.", "norm2.": "norm2.",
             "attention.output.dense.": "attn.proj.", "intermediate.dense.": "mlp.fc1.", "output.dense.": "mlp.fc2.",
             "mlp.fc1.": "mlp.fc1.", "mlp.fc2.": "mlp.fc2.", "mlp.weights_in.": "mlp.fc1.",
             "mlp.weights_out.": "mlp.fc2.", "layer_scale1.lambda1": "ls1.gamma", "layer_scale2.lambda1": "ls2.gamma"}


def from_transformers(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' ``ViTModel`` / ``Dinov2Model`` names (a ``vit.`` or ``dinov2.`` prefix removed) to timm's:
    q, k and v stacked into qkv; the pooler and a classifier left out. DINOv2's go on through
    :func:`from_dinov2` (its mask token and registers); a SwiGLU MLP's ``weights_in``/``weights_out`` are
    timm's GluMlp ``fc1``/``fc2``."""
    prefix = next((p for p in ("vit.", "dinov2.") if any(k.startswith(p) for k in state)), "")
    plain = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)} if prefix else dict(state)
    out: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[str, str], dict[str, torch.Tensor]] = {}
    for key, value in plain.items():
        if key.startswith(("pooler.", "classifier.")):
            continue
        emb = {"embeddings.cls_token": "cls_token", "embeddings.position_embeddings": "pos_embed",
               "embeddings.mask_token": "mask_token", "embeddings.register_tokens": "register_tokens"}
        if key in emb:
            out[emb[key]] = value
        elif key.startswith("embeddings.patch_embeddings.projection."):
            out["patch_embed.proj." + key.rsplit(".", 1)[1]] = value
        elif key.startswith("layernorm."):
            out["norm." + key[len("layernorm."):]] = value
        elif (match := _HF_LAYER.fullmatch(key)) is not None:
            n, rest = match.groups()
            part = re.fullmatch(r"attention\.attention\.(query|key|value)\.(weight|bias)", rest)
            if part:
                qkv.setdefault((n, part.group(2)), {})[part.group(1)] = value
                continue
            new = next((theirs + rest[len(ours):] for ours, theirs in _HF_NAMES.items() if rest.startswith(ours)), rest)
            out[f"blocks.{n}.{new}"] = value
        else:
            out[key] = value  # unknown: the strict load names it
    for (n, kind), parts in qkv.items():
        if set(parts) != {"query", "key", "value"}:
            raise checkpoint.CheckpointError(f"layer {n}: its attention {kind} has {sorted(parts)} of query, key and "
                                             f"value")
        out[f"blocks.{n}.attn.qkv.{kind}"] = torch.cat([parts["query"], parts["key"], parts["value"]])
    return out
