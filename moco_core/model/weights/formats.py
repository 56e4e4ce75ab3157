"""What each weights format is: the method that trained the weights, the encoder an evaluation reads, and the input
normalisation the method trained with. Torch-free, so that the commands' ``--help`` and option checks load fast.

A format here is named after its method (the value of ``--weights-format``); the key layout of a file is detected
from the file (:mod:`moco_core.model.weights.detect`). Normalisation is part of the format: SimCLR's converted
weights expect pixels in [0, 1] with no mean or std (tonylins/simclr-converter's README: evaluated "without
normalization"); every other method here trained on torchvision's ImageNet statistics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Normalisation:
    """Per-channel ``(x - mean) / std`` of RGB pixels in [0, 1]; ``none`` is mean 0, std 1 (the identity)."""

    name: str  # "imagenet", "none", "cifar", or "stated by the file" (a config.json beside a safetensors file)
    mean: tuple[float, float, float]
    std: tuple[float, float, float]

    def record(self) -> dict[str, Any]:
        """The record's ``backbone.normalisation``."""
        return {"name": self.name, "mean": list(self.mean), "std": list(self.std)}


IMAGENET = Normalisation("imagenet", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))  # torchvision's statistics
UNNORMALISED = Normalisation("none", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))  # SimCLR: [0, 1] pixels as they are
# solo-learn's CIFAR pipeline (solo/data/classification_dataloader.py, its cifar_pipeline), for its CIFAR-stem ResNets
CIFAR = Normalisation("cifar", (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261))


@dataclass(frozen=True)
class Method:
    """A method whose weights can be evaluated: its name (``--weights-format``), label, encoder and normalisation."""

    name: str
    label: str  # as reports write it
    encoder: str  # the network an evaluation reads: query, teacher, online, backbone, encoder
    normalisation: Normalisation
    families: tuple[str, ...]  # the backbones its released weights come in: "resnet", "vit"
    paper: str  # arXiv id


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("supervised", "supervised", "backbone", IMAGENET, ("resnet", "vit"), "1512.03385"),
    Method("moco", "MoCo", "query", IMAGENET, ("resnet",), "1911.05722"),
    Method("mocov3", "MoCo v3", "query", IMAGENET, ("resnet", "vit"), "2104.02057"),
    Method("dino", "DINO", "teacher", IMAGENET, ("resnet", "vit"), "2104.14294"),
    Method("dinov2", "DINOv2", "teacher", IMAGENET, ("vit",), "2304.07193"),
    Method("swav", "SwAV", "backbone", IMAGENET, ("resnet",), "2006.09882"),
    Method("deepcluster-v2", "DeepCluster-v2", "backbone", IMAGENET, ("resnet",), "2006.09882"),
    Method("sela-v2", "SeLa-v2", "backbone", IMAGENET, ("resnet",), "2006.09882"),
    Method("barlowtwins", "Barlow Twins", "backbone", IMAGENET, ("resnet",), "2103.03230"),
    Method("byol", "BYOL", "online", IMAGENET, ("resnet",), "2006.07733"),
    Method("simclr-v1", "SimCLR v1", "backbone", UNNORMALISED, ("resnet",), "2002.05709"),
    Method("simclr-v2", "SimCLR v2", "backbone", UNNORMALISED, ("resnet",), "2006.10029"),
    Method("mae", "MAE", "encoder", IMAGENET, ("vit",), "2111.06377"),
)}
WEIGHTS_FORMATS = tuple(METHODS)  # what --weights-format takes


class UnknownFormatError(ValueError):
    """A --weights-format value that names no method here."""


def method(name: str) -> Method:
    """The method ``name`` (a --weights-format value); UnknownFormatError naming the choices otherwise."""
    if name not in METHODS:
        raise UnknownFormatError(f"unknown weights format {name!r}; expected one of {', '.join(WEIGHTS_FORMATS)}")
    return METHODS[name]


def format_checks(value: str | None, key: str = "run.weights_format") -> list[tuple[bool, str, str]]:
    """The config check of a weights format (None: detected from the file), for :func:`moco_core.config.require`."""
    return [(value is None or value in METHODS, key,
             f"{value!r} is no weights format; expected one of {', '.join(WEIGHTS_FORMATS)}, or leave it out to read "
             f"what the file says")]
