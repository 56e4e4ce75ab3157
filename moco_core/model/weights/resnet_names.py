"""ResNets under torchvision's names: recognising them, telling which ResNet they are, and mapping the other names
codebases give the same tensors (lightly's ``nn.Sequential`` of the ResNet's children, SimCLR v2's converter).

A CIFAR stem (solo-learn's and others' ResNets for 32-pixel images: a 3x3 conv1 of stride 1 and no max-pool) is the
arch's name with ``_cifar``: ``resnet18_cifar``.
"""

from __future__ import annotations

import re

import torch

from moco_core import checkpoint

# Blocks per stage, by arch; BasicBlock archs have no conv3.
_DEPTHS = {(2, 2, 2, 2): "resnet18", (3, 4, 6, 3): "resnet34"}
_BOTTLENECK_DEPTHS = {(3, 4, 6, 3): "resnet50", (3, 4, 23, 3): "resnet101", (3, 8, 36, 3): "resnet152"}
CIFAR_SUFFIX = "_cifar"


def is_resnet(state: dict[str, torch.Tensor]) -> bool:
    """Whether ``state`` holds a torchvision ResNet's tensors (its stem and first block)."""
    return "conv1.weight" in state and "layer1.0.conv1.weight" in state


def without_fc(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in state.items() if not k.startswith("fc.")}


def stem_of(state: dict[str, torch.Tensor]) -> str:
    """"cifar" for a 3x3 conv1 (stride 1, no max-pool: the CIFAR ResNets), else "imagenet"."""
    conv1 = state.get("conv1.weight")
    return "cifar" if conv1 is not None and conv1.ndim == 4 and conv1.shape[-1] == 3 else "imagenet"


def infer_arch(state: dict[str, torch.Tensor]) -> str:
    """The torchvision ResNet a backbone state_dict (no prefix) belongs to, from its block counts and widths; with
    ``_cifar`` for a CIFAR stem."""
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
    return arch + (CIFAR_SUFFIX if stem_of(state) == "cifar" else "")


# lightly's examples build the backbone as nn.Sequential(*list(resnet.children())[:-1]): its children in order
_CHILDREN = {"0": "conv1", "1": "bn1", "4": "layer1", "5": "layer2", "6": "layer3", "7": "layer4"}


def from_children(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    """A ResNet saved as ``nn.Sequential`` of its children (``0.weight`` conv1, ``1.*`` bn1, ``4.0.conv1.weight``
    layer1...) under torchvision's names; None when the keys are not that (a key outside those children)."""
    out = {}
    for key, value in state.items():
        head, _, rest = key.partition(".")
        if head not in _CHILDREN:
            return None
        out[f"{_CHILDREN[head]}.{rest}"] = value
    return out if is_resnet(out) else None


# SimCLR v2's converter (Separius/SimCLRv2-Pytorch resnet.py: net.0 the stem, net.1-4 the stages; a block's
# ops in net.N, its projection shortcut; BatchNormRelu wraps each BN at index 0): its ops in order -> torchvision
_SIMCLR_V2_BLOCK = {"net.0.": "conv1.", "net.1.0.": "bn1.", "net.2.": "conv2.", "net.3.0.": "bn2.",
                    "net.4.": "conv3.", "net.5.0.": "bn3.", "projection.shortcut.": "downsample.0.",
                    "projection.bn.0.": "downsample.1."}
_SIMCLR_V2_KEY = re.compile(r"net\.([1-4])\.blocks\.(\d+)\.(.+)")


def from_simclr_v2(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """SimCLR v2's converted ResNet (selective kernels 0, width 1: the ones torchvision's ResNets can hold) under
    torchvision's names, ``fc`` left out. A key of another shape (a selective kernel's ``main_conv``, a width-2
    stem) is left under its own name, so that the strict load names it."""
    out = {}
    for key, value in state.items():
        if key.startswith("fc."):
            continue
        if key.startswith("net.0.0."):
            out["conv1." + key[len("net.0.0."):]] = value
            continue
        if key.startswith("net.0.1.0."):
            out["bn1." + key[len("net.0.1.0."):]] = value
            continue
        match = _SIMCLR_V2_KEY.fullmatch(key)
        new = None
        if match:
            stage, block, rest = match.groups()
            new = next((f"layer{stage}.{block}.{theirs}{rest[len(ours):]}" for ours, theirs in _SIMCLR_V2_BLOCK.items()
                        if rest.startswith(ours)), None)
        out[new or key] = value
    return out
