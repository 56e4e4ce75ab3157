"""Where a frozen backbone is read: named features ("taps"), all computed in one forward pass.

A ResNet (torchvision's, whatever its stem) is read after a stage, globally average-pooled: ``layer4`` is the
paper's feature (the pooled last stage, 2,048-d on ResNet-50); ``layer1`` .. ``layer3`` are the earlier stages.

A ViT (timm's ``VisionTransformer``: ours, and every ViT the weight readers build) is read as DINOv2's linear
evaluation reads it (facebookresearch/dinov2 ``eval/linear.py``, arXiv 2304.07193): the class tokens of the last
``n`` blocks, each through the final LayerNorm, concatenated, optionally followed by the mean of the last block's
patch tokens (through the same norm; register tokens are neither). Names: ``cls`` (n = 1: the class token the
model's own head reads), ``cls4`` (n = 4), and either with ``+avg``: ``cls+avg``, ``cls4+avg``.

:class:`FeatureTaps` wraps a backbone and returns ``{tap: (N, D_tap)}`` for the taps asked for; the backbone's
classifier (``fc`` / ``head``) is never run.

Dense taps (:class:`DenseTaps`) keep the spatial grid, for the probes that read patch features (segmentation,
depth, retrieval, label propagation): a ResNet stage's feature map (``layer1`` .. ``layer4``, stride 4 .. 32), a
ViT's last block's patch tokens through the final norm (``patch``) or the last 4 blocks' concatenated
(``patch4``, DINOv2's "lin.4" input), stride = the patch size. Each is ``(N, C_tap, H / stride, W / stride)``.
"""

from __future__ import annotations

import re

import torch
from torch import nn

from moco_core.model.vit import is_vit

RESNET_TAPS = ("layer4", "layer3", "layer2", "layer1")
VIT_TAPS = ("cls", "cls+avg", "cls4", "cls4+avg")
VIT_DENSE_TAPS = ("patch", "patch4")
_VIT_DENSE_TAP = re.compile(r"patch(\d*)")
_VIT_TAP = re.compile(r"cls(\d*)(\+avg)?")


def default_tap(backbone: nn.Module) -> str:
    """The feature every protocol reads unless told otherwise: a ViT's class token, a ResNet's pooled last stage."""
    return "cls" if is_vit(backbone) else "layer4"


def available_taps(backbone: nn.Module) -> tuple[str, ...]:
    return VIT_TAPS if is_vit(backbone) else RESNET_TAPS


def _vit_match(name: str, depth: int, pattern: re.Pattern[str], what: str, names: tuple[str, ...],
               hint: str) -> re.Match[str]:
    """``name`` matched against a ViT tap ``pattern`` whose first group counts the last blocks read (1 when
    absent), within the ``depth`` blocks the ViT has; ValueError naming ``what`` was asked for otherwise."""
    match = pattern.fullmatch(name)
    if not match:
        raise ValueError(f"unknown ViT {what} {name!r}; expected one of {', '.join(names)} ({hint})")
    if not 1 <= int(match[1] or 1) <= depth:
        raise ValueError(f"{what} {name!r}: the ViT has {depth} blocks")
    return match


def _vit_tap(name: str, depth: int) -> tuple[int, bool]:
    """(blocks, with the patch average) of a ViT tap name: ``cls`` (1), ``cls4+avg`` (4, True)."""
    match = _vit_match(name, depth, _VIT_TAP, "feature", VIT_TAPS, "clsN: the last N blocks' class tokens")
    return int(match[1] or 1), bool(match[2])


class FeatureTaps(nn.Module):
    """``backbone`` read at ``taps`` in one pass: images (N, 3, H, W) -> {tap: (N, D_tap)} (float, the backbone's
    dtype under autocast). The backbone is used as it is (its mode, its device); nothing is trained here."""

    def __init__(self, backbone: nn.Module, taps: tuple[str, ...]) -> None:
        super().__init__()
        if not taps:
            raise ValueError("no feature taps asked for")
        self.backbone = backbone
        self.taps = tuple(dict.fromkeys(taps))  # order kept, each once
        self.vit = is_vit(backbone)
        if self.vit:
            depth = len(backbone.blocks)
            self._vit = {tap: _vit_tap(tap, depth) for tap in self.taps}
            self._blocks = max(blocks for blocks, _ in self._vit.values())
        else:
            unknown = [tap for tap in self.taps if tap not in RESNET_TAPS]
            if unknown:
                raise ValueError(f"unknown ResNet feature {unknown[0]!r}; expected some of {', '.join(RESNET_TAPS)}")
            self._stages = max(int(tap[-1]) for tap in self.taps)

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        return self._vit_forward(images) if self.vit else self._resnet_forward(images)

    def _resnet_forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        m = self.backbone
        x = m.maxpool(m.relu(m.bn1(m.conv1(images))))
        out = {}
        for stage in range(1, self._stages + 1):
            x = getattr(m, f"layer{stage}")(x)  # (N, C_stage, H_s, W_s)
            if f"layer{stage}" in self.taps:
                out[f"layer{stage}"] = torch.flatten(m.avgpool(x) if stage == 4 else x.mean((2, 3), keepdim=True), 1)
        return {tap: out[tap] for tap in self.taps}

    def _vit_forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        # timm's forward_intermediates: the last `blocks` blocks' outputs, each through the final norm, as pairs of
        # patch tokens (N, L, D) and prefix tokens (N, 1 + registers, D); the last pair is the last block's.
        pairs = self.backbone.forward_intermediates(
            images, indices=self._blocks, norm=True, output_fmt="NLC", intermediates_only=True,
            return_prefix_tokens=True)
        patches, prefixes = [p for p, _ in pairs], [q for _, q in pairs]
        out = {}
        for tap, (blocks, with_avg) in self._vit.items():
            parts = [prefix[:, 0] for prefix in prefixes[-blocks:]]  # class tokens, earliest block first
            if with_avg:
                parts.append(patches[-1].mean(1))  # (N, D): the last block's patch tokens, registers left out
            out[tap] = torch.cat(parts, dim=1)
        return out

    def dims(self, image_size: int) -> dict[str, int]:
        """Each tap's width, from one forward pass of a blank image batch of 1 (the backbone's own device)."""
        param = next(self.backbone.parameters())
        with torch.no_grad():
            out = self(torch.zeros(1, 3, image_size, image_size, device=param.device, dtype=param.dtype))
        return {tap: value.shape[1] for tap, value in out.items()}


def available_dense_taps(backbone: nn.Module) -> tuple[str, ...]:
    return VIT_DENSE_TAPS if is_vit(backbone) else RESNET_TAPS


def default_dense_tap(backbone: nn.Module) -> str:
    """The patch features a dense probe reads unless told otherwise: a ViT's last block, a ResNet's last stage."""
    return "patch" if is_vit(backbone) else "layer4"


def _vit_dense_blocks(name: str, depth: int) -> int:
    """The last blocks a dense ViT tap name reads: ``patch`` (1), ``patch4`` (4)."""
    match = _vit_match(name, depth, _VIT_DENSE_TAP, "dense feature", VIT_DENSE_TAPS,
                       "patchN: the last N blocks' patch tokens")
    return int(match[1] or 1)


class DenseTaps(nn.Module):
    """``backbone`` read at dense ``taps`` in one pass: images (N, 3, H, W) -> {tap: (N, C_tap, H/s, W/s)} with
    ``s = self.stride[tap]`` (H and W multiples of the stride). Used as it is (mode, device); nothing is trained."""

    def __init__(self, backbone: nn.Module, taps: tuple[str, ...]) -> None:
        super().__init__()
        if not taps:
            raise ValueError("no feature taps asked for")
        self.backbone = backbone
        self.taps = tuple(dict.fromkeys(taps))
        self.vit = is_vit(backbone)
        if self.vit:
            depth = len(backbone.blocks)
            self._vit = {tap: _vit_dense_blocks(tap, depth) for tap in self.taps}
            self._blocks = max(self._vit.values())
            patch = backbone.patch_embed.patch_size
            self.stride = {tap: int(patch[0] if isinstance(patch, tuple) else patch) for tap in self.taps}
        else:
            unknown = [tap for tap in self.taps if tap not in RESNET_TAPS]
            if unknown:
                raise ValueError(f"unknown ResNet dense feature {unknown[0]!r}; expected some of "
                                 f"{', '.join(RESNET_TAPS)}")
            self._stages = max(int(tap[-1]) for tap in self.taps)
            self.stride = {tap: 2 ** (int(tap[-1]) + 1) for tap in self.taps}

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.vit:
            # (N, D, H/p, W/p) per block, through the final norm, register and class tokens left out
            maps = self.backbone.forward_intermediates(
                images, indices=self._blocks, norm=True, output_fmt="NCHW", intermediates_only=True)
            return {tap: torch.cat(maps[-blocks:], dim=1) for tap, blocks in self._vit.items()}
        m = self.backbone
        x = m.maxpool(m.relu(m.bn1(m.conv1(images))))
        out = {}
        for stage in range(1, self._stages + 1):
            x = getattr(m, f"layer{stage}")(x)
            out[f"layer{stage}"] = x
        return {tap: out[tap] for tap in self.taps}

    def dims(self, image_size: int) -> dict[str, int]:
        """Each tap's channel count, from one forward pass of a blank image (the backbone's own device)."""
        param = next(self.backbone.parameters())
        with torch.no_grad():
            out = self(torch.zeros(1, 3, image_size, image_size, device=param.device, dtype=param.dtype))
        return {tap: value.shape[1] for tap, value in out.items()}
