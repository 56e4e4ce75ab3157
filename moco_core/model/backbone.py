"""Backbones for evaluation: the query encoder of a MoCo checkpoint, a torchvision state_dict, or random init.

The format is detected from the file, never from its name. Every file is read with ``weights_only=True``.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import nn

from moco_core import checkpoint
from moco_core.config import ARCHS
from moco_core.errors import UserError
from moco_core.model.vit import VIT_SHAPES

QUERY_PREFIX = checkpoint.QUERY_PREFIX
BASE_PREFIX = checkpoint.BASE_PREFIX
# Bottleneck blocks per stage, by arch; BasicBlock archs have no conv3.
_DEPTHS = {(2, 2, 2, 2): "resnet18", (3, 4, 6, 3): "resnet34"}
_BOTTLENECK_DEPTHS = {(3, 4, 6, 3): "resnet50", (3, 4, 23, 3): "resnet101", (3, 8, 36, 3): "resnet152"}


@dataclass(frozen=True)
class BackboneInfo:
    """Where the weights came from, for the result record."""

    source: str  # the path, or "random"
    format: str  # "moco-suite", "official-moco", "torchvision", "random"
    arch: str
    sha256: str | None  # of the file, so results trace to the exact weights
    # method, epochs (completed: the checkpoint's "epoch"), partial_epoch_steps, config of our checkpoints; what
    # is known otherwise
    pretrain: dict[str, Any]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def infer_vit(state: dict[str, torch.Tensor]) -> tuple[str, int] | None:
    """(arch, crop size) of a ViT backbone state_dict from its shapes (patch size, width, depth, position
    embedding), or None for weights that are no ViT. The number of heads is not in the weights: v3's is taken."""
    proj, pos = state.get("patch_embed.proj.weight"), state.get("pos_embed")
    if proj is None or pos is None:
        return None
    depth = 1 + max((int(k.split(".")[1]) for k in state if k.startswith("blocks.")), default=-1)
    for arch, shape in VIT_SHAPES.items():
        if (shape.patch_size, shape.embed_dim, shape.depth) == (proj.shape[-1], proj.shape[0], depth):
            grid = math.isqrt(pos.shape[1] - 1)
            return arch, grid * shape.patch_size
    raise checkpoint.CheckpointError(f"a ViT of width {proj.shape[0]}, depth {depth} and {proj.shape[-1]}-pixel "
                                     f"patches is none of {', '.join(VIT_SHAPES)}")


def infer_arch(state: dict[str, torch.Tensor]) -> str:
    """The torchvision ResNet a backbone state_dict (no prefix) belongs to, from its block counts and widths."""
    vit = infer_vit(state)
    if vit is not None:
        raise checkpoint.CheckpointError(f"holds a ViT ({vit[0]}), not a ResNet: this command takes ResNets only")
    depths = tuple(
        1 + max((int(k.split(".")[1]) for k in state if k.startswith(f"layer{i}.")), default=-1) for i in range(1, 5)
    )
    if "layer1.0.conv3.weight" not in state:
        arch = _DEPTHS.get(depths)
    else:
        arch = _BOTTLENECK_DEPTHS.get(depths)
        if arch and state["layer1.0.conv2.weight"].shape[0] == 128:  # wide: twice the bottleneck width
            arch = {"resnet50": "wide_resnet50_2", "resnet101": "wide_resnet101_2"}.get(arch)
    if arch is None:
        raise checkpoint.CheckpointError(f"cannot tell which ResNet these weights are for (blocks per stage {depths})")
    return arch


def _describe(obj: dict[str, Any]) -> str:
    keys = list(obj)[:4]
    hint = " (a detectron2 model?)" if "model" in obj or "__author__" in obj else ""
    return f"a dict with keys {', '.join(map(str, keys))}{'...' if len(obj) > 4 else ''}{hint}"


def partial_epoch_steps(obj: dict[str, Any]) -> int:
    """Steps a mid-epoch checkpoint trained into the epoch after its ``epoch`` completed ones (its sampler
    position; 0 at an epoch's end): a run stopped in its third epoch holds epoch 2 and these steps."""
    position = obj.get("sampler", {}).get("position") if isinstance(obj.get("sampler"), dict) else None
    return position if isinstance(position, int) and not isinstance(position, bool) and position > 0 else 0


def read_backbone_state(path: Path) -> tuple[dict[str, torch.Tensor], str, dict[str, Any]]:
    """(backbone state_dict without fc, format, pretraining facts) from a checkpoint file of any known format.

    Weights holding NaN or inf (a run that diverged after its last good checkpoint, a damaged file) are refused:
    every evaluation of them would be noise (a kNN of NaN features scored 50% on two classes)."""
    path = checkpoint.resolve(path) if path.is_dir() else path
    state, fmt, facts = _read_backbone_state(path)
    broken = [key for key, value in state.items() if value.is_floating_point() and not torch.isfinite(value).all()]
    if broken:
        raise checkpoint.CheckpointError(f"{path}: {len(broken)} of its {len(state)} backbone tensors hold NaN or "
                                         f"inf ({', '.join(broken[:3])}{', ...' if len(broken) > 3 else ''}); "
                                         f"nothing can be evaluated from them")
    return state, fmt, facts


def _read_backbone_state(path: Path) -> tuple[dict[str, torch.Tensor], str, dict[str, Any]]:
    obj = checkpoint.load(path)
    state = obj.get("state_dict")
    if isinstance(state, dict) and any(isinstance(k, str) and k.startswith(BASE_PREFIX) for k in state):
        # MoCo v3 (ours, or the official moco-v3's): the base encoder less its projector (fc on a ResNet, head on
        # a ViT), the key handling of the official main_lincls.py
        fmt = "moco-suite" if obj.get("format") == "moco-suite" else "official-mocov3"
        backbone = {k[len(BASE_PREFIX):]: v for k, v in state.items() if k.startswith(BASE_PREFIX)
                    and not k.startswith((BASE_PREFIX + "fc.", BASE_PREFIX + "head."))}
        config = obj.get("config") if isinstance(obj.get("config"), dict) else {}
        facts = {"method": obj.get("method", "mocov3"), "epochs": obj.get("epoch"),
                 "partial_epoch_steps": partial_epoch_steps(obj), "arch": obj.get("arch"), "config": config,
                 "code_version": obj.get("code_version")}
        return backbone, fmt, facts
    if isinstance(state, dict) and any(k.startswith(QUERY_PREFIX) for k in state):
        fmt = "moco-suite" if obj.get("format") == "moco-suite" else "official-moco"
        backbone = {k[len(QUERY_PREFIX):]: v for k, v in state.items()
                    if k.startswith(QUERY_PREFIX) and not k.startswith(QUERY_PREFIX + "fc.")}
        config = obj.get("config") if isinstance(obj.get("config"), dict) else {}
        facts = {"method": obj.get("method", "moco"), "epochs": obj.get("epoch"),
                 "partial_epoch_steps": partial_epoch_steps(obj), "arch": obj.get("arch"), "config": config,
                 "code_version": obj.get("code_version")}
        return backbone, fmt, facts
    if isinstance(state, dict) and "conv1.weight" in state and "layer1.0.conv1.weight" in state:
        # our supervised baseline (or any wrapper around a torchvision ResNet state_dict)
        backbone = {k: v for k, v in state.items() if not k.startswith("fc.")}
        config = obj.get("config") if isinstance(obj.get("config"), dict) else {}
        return backbone, "torchvision", {"method": obj.get("method", "supervised"), "epochs": obj.get("epoch"),
                                         "partial_epoch_steps": partial_epoch_steps(obj), "arch": obj.get("arch"),
                                         "config": config, "code_version": obj.get("code_version")}
    if isinstance(state, dict) and any(k.startswith("module.") for k in state):
        raise checkpoint.CheckpointError(f"{path}: has a state_dict without module.encoder_q.* (v1/v2) or "
                                         f"module.base_encoder.* (v3) keys; not a MoCo pretraining checkpoint")
    if "conv1.weight" in obj and "layer1.0.conv1.weight" in obj and all(isinstance(v, torch.Tensor)
                                                                         for v in obj.values()):
        backbone = {k: v for k, v in obj.items() if not k.startswith("fc.")}
        return backbone, "torchvision", {"method": "supervised"}
    raise checkpoint.CheckpointError(f"{path}: not a MoCo checkpoint nor a torchvision ResNet state_dict; found "
                                     f"{_describe(obj)}")


def load_resnet(source: str, *, arch: str | None = None, num_classes: int = 1000,
                arch_option: str = "--arch") -> tuple[torchvision.models.ResNet, BackboneInfo]:
    """A torchvision ResNet holding ``source``'s weights (a checkpoint path of any format read here, or "random").

    ``arch`` is the ResNet asked for (the file must hold it; "random" needs it), named in errors as
    ``arch_option``. Loading must leave exactly fc.weight and fc.bias missing (the check of the official
    main_lincls.py); anything else fails with a one-line CheckpointError. fc keeps torchvision's initialisation.
    """
    if source == "random":
        if arch is None:
            also = f" ({arch_option})" if arch_option != "--arch" else ""
            raise checkpoint.CheckpointError(f"'random' needs the ResNet to initialise: pass --arch{also}")
        chosen = arch
        if chosen not in ARCHS:
            raise checkpoint.CheckpointError(f"unknown arch {chosen!r}; expected one of {list(ARCHS)} (or, where "
                                             f"a ViT can be evaluated, {list(VIT_SHAPES)})")
        model = getattr(torchvision.models, chosen)(num_classes=num_classes)
        return model, BackboneInfo("random", "random", chosen, None, {"method": "random init"})
    path = checkpoint.resolve(source) if Path(source).is_dir() else Path(source)  # a run directory: its last
    state, fmt, facts = read_backbone_state(path)
    return _resnet_from_state(path, state, fmt, facts, arch=arch, num_classes=num_classes, arch_option=arch_option)


def _resnet_from_state(path: Path, state: dict[str, torch.Tensor], fmt: str, facts: dict[str, Any], *,
                       arch: str | None, num_classes: int,
                       arch_option: str = "--arch") -> tuple[torchvision.models.ResNet, BackboneInfo]:
    try:
        found = infer_arch(state)
    except checkpoint.CheckpointError as err:
        raise checkpoint.CheckpointError(f"{path}: {err}") from None
    if arch is not None and arch != found:
        raise checkpoint.CheckpointError(f"{path}: holds {found} weights, but {arch_option} {arch} was asked for")
    model = getattr(torchvision.models, found)(num_classes=num_classes)
    _load_all_but_head(model, state, path, found, "fc")
    return model, BackboneInfo(str(path), fmt, found, file_sha256(path), facts)


def _load_all_but_head(model: nn.Module, state: dict[str, torch.Tensor], path: Path, arch: str, head: str) -> None:
    """Load ``state`` (from ``path``) into ``model``: it must leave exactly ``<head>.weight`` and ``<head>.bias``
    missing (the new classifier) and nothing unexpected; a CheckpointError names what differs."""
    result = model.load_state_dict(state, strict=False)
    new = {f"{head}.weight", f"{head}.bias"}
    if set(result.missing_keys) != new or result.unexpected_keys:
        missing = sorted(set(result.missing_keys) - new)
        raise checkpoint.CheckpointError(
            f"{path}: not a complete {arch} backbone: missing {missing[:4]}, unexpected "
            f"{sorted(result.unexpected_keys)[:4]}; loading must leave exactly {head}.weight and {head}.bias missing")


def load_vit(path: Path, state: dict[str, torch.Tensor], fmt: str, facts: dict[str, Any], *, num_classes: int,
             arch: str | None = None) -> tuple[nn.Module, BackboneInfo]:
    """A ViT (moco_core/model/vit.py) holding ``state`` (read from ``path``) at the crop size it was trained at, with a
    new ``head`` for ``num_classes``; loading must leave exactly head.weight and head.bias missing."""
    from moco_core.model.vit import build_vit

    found, img_size = infer_vit(state) or ("", 0)
    if arch is not None and arch != found:
        raise checkpoint.CheckpointError(f"{path}: holds {found} weights, but --arch {arch} was asked for")
    model = build_vit(found, img_size=img_size, num_classes=num_classes)
    _load_all_but_head(model, state, path, found, "head")
    return model, BackboneInfo(str(path), fmt, found, file_sha256(path), facts)


def load_backbone(source: str, num_classes: int, *, arch: str | None = None, crop_size: int | None = None,
                  crop_option: str = "--crop-size {}") -> tuple[nn.Module, BackboneInfo]:
    """:func:`load_resnet` (or, for a ViT checkpoint or a random ViT ``arch``, :func:`load_vit`) with a new fc or
    head (N(0, 0.01), bias 0) for ``num_classes``, as main_lincls.py.

    ``crop_size``: the crops the evaluation feeds it. A random ViT is built for them; a ViT from a file takes the
    crops it was trained at (its fixed position embedding is for that grid of patches), and other crops stop with
    one line with ``crop_option`` (a template of the option that sets them) filled in."""
    if source == "random" and arch in VIT_SHAPES:
        from moco_core.model.vit import build_vit

        model: nn.Module = build_vit(arch, img_size=crop_size or 224, num_classes=num_classes)
        info = BackboneInfo("random", "random", arch, None, {"method": "random init"})
        head = model.head
    elif source == "random":
        model, info = load_resnet(source, arch=arch, num_classes=num_classes)
        head = model.fc
    else:
        path = checkpoint.resolve(source) if Path(source).is_dir() else Path(source)
        state, fmt, facts = read_backbone_state(path)
        if infer_vit(state) is not None:
            model, info = load_vit(path, state, fmt, facts, num_classes=num_classes, arch=arch)
            trained = model.patch_embed.img_size[0]
            if crop_size is not None and crop_size != trained:
                raise UserError(f"{source}: its ViT ({info.arch}) takes {trained}-px crops, not {crop_size}; "
                                f"evaluate it with {crop_option.format(trained)}")
            head = model.head
        else:
            model, info = _resnet_from_state(path, state, fmt, facts, arch=arch, num_classes=num_classes)
            head = model.fc
    nn.init.normal_(head.weight, mean=0.0, std=0.01)
    nn.init.zeros_(head.bias)
    return model, info
