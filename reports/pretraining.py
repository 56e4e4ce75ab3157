"""Pretrainings: where a backbone's weights came from, how a row names them, and the digests that tell trials of
one recipe (other seeds) from other recipes.

Our pretrainings are labelled by the epochs they completed, against the epochs their config planned: a run stopped
by a signal in its third epoch of 20 holds the checkpoint's ``epoch`` 2 (the epoch to run next, as main_moco.py
writes it) and the steps it had trained of the third, "2 of 20 ep + 6 steps, unfinished".
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Pretraining kinds, in the order rows appear in a table (the paper's: random init, supervised, then ours).
# "released": weights another codebase released (DINO's, SwAV's, a timm file...), labelled by the method their
# file states or the user named (--weights-format; moco_core/model/weights/), never by a guess.
KIND_ORDER = ("random", "torchvision", "supervised", "official", "ours", "released", "unknown")
METHOD_NAMES = {"moco": "MoCo", "mocov3": "MoCo v3", "end2end": "end-to-end", "memory-bank": "memory bank",
                "supervised": "supervised", "dino": "DINO", "dinov2": "DINOv2", "swav": "SwAV",
                "deepcluster-v2": "DeepCluster-v2", "sela-v2": "SeLa-v2", "barlowtwins": "Barlow Twins",
                "byol": "BYOL", "simclr-v1": "SimCLR v1", "simclr-v2": "SimCLR v2", "mae": "MAE"}
# Rows are grouped by method, in this order (after random init and the supervised rows), then by backbone
METHOD_ORDER = ("moco", "mocov3", "end2end", "memory-bank", "dino", "dinov2", "swav", "deepcluster-v2", "sela-v2",
                "barlowtwins", "byol", "simclr-v1", "simclr-v2", "mae")
ABSENT_METHODS = (None, "", "unknown")
NAMED = "--weights-format"  # a record's backbone.pretrain.stated_by when the user named the method


@dataclass(frozen=True)
class Pretraining:
    """Where a backbone's weights came from: the identity trials are grouped by, and a readable label."""

    kind: str  # one of KIND_ORDER
    method: str | None
    arch: str
    data: str | None  # readable name of the pretraining data ("embedded", "imagenet", ...)
    data_path: str | None
    epochs: int | None  # completed: a checkpoint's "epoch", the epoch to run next (main_moco.py's field)
    sha256: str | None
    source: str
    format: str
    recipe: str | None = None  # our pretrainings: the config that made them, less its run section (seed, paths)
    planned_epochs: int | None = None  # our pretrainings: their config's optim.epochs
    partial_steps: int = 0  # steps trained into the unfinished epoch after ``epochs`` (a mid-epoch checkpoint)
    snapshot: bool = False  # a snapshot kept on the way (moco eval snapshots), not where the run stopped
    variant: str | None = None  # method "moco": "v1" or "v2" where its config is one of the two recipes
    stated_by: str | None = None  # who named the method: "file", or NAMED (the user); None in older records
    encoder: str | None = None  # the network read: query, teacher, online, encoder, backbone
    normalisation: str | None = None  # the input statistics' name: "imagenet", "none" (SimCLR's [0, 1] pixels)...
    registers: int = 0  # a ViT's register tokens (DINOv2's _reg4 backbones)

    @property
    def method_label(self) -> str:
        """"MoCo v1", "MoCo v2" (method moco, by its config: :func:`moco_variant`), "MoCo v3", "end-to-end"..."""
        name = method_name(self.method)
        return f"{name} {self.variant}" if self.variant else name

    @property
    def short_hash(self) -> str:
        return (self.sha256 or "")[:6]

    @property
    def is_supervised(self) -> bool:
        return self.kind in ("supervised", "torchvision") or (self.kind == "released" and self.method == "supervised")

    @property
    def unfinished(self) -> bool:
        """Stopped before the epochs its config planned (a snapshot is not: the run went on)."""
        if self.snapshot or self.epochs is None:
            return False
        return self.partial_steps > 0 or (self.planned_epochs is not None and self.epochs < self.planned_epochs)

    @property
    def unfinished_field(self) -> str:
        """The CSV's ``pretrain_unfinished``: "yes" or "no" where the record says enough to tell, else empty."""
        known = self.epochs is not None and (self.planned_epochs is not None or self.partial_steps > 0)
        return ("yes" if self.unfinished else "no") if known else ""

    @property
    def epochs_text(self) -> str:
        """"100 ep"; "2 of 20 ep + 6 steps, unfinished" for a run stopped in its third epoch; "10 of 100 ep,
        snapshot"; "" where the record names no epochs."""
        if self.epochs is None:
            return ""
        short = self.planned_epochs is not None and self.epochs < self.planned_epochs
        text = f"{self.epochs} of {self.planned_epochs} ep" if short else f"{self.epochs} ep"
        if self.partial_steps:
            text += f" + {self.partial_steps} steps"
        if self.snapshot:
            return text + ", snapshot" if short else text
        return text + ", unfinished" if self.unfinished else text

    @property
    def label(self) -> str:
        """E.g. "MoCo v2 (R18, 15 ep, embedded) a1b2c3", "MoCo (R18, 2 of 20 ep + 6 steps, unfinished, embedded)",
        "MoCo v3 (ViT-S/16, 300 ep, imagenet)", "supervised (torchvision weights, R50) 0f1e2d",
        "random init (R18)"."""
        arch = short_arch(self.arch)
        if self.kind == "random":
            return f"random init ({arch})"
        if self.kind == "torchvision":
            return _with_hash(f"supervised (torchvision weights, {arch})", self.short_hash)
        details = ", ".join(p for p in (arch, self.epochs_text, self.data) if p)
        if self.kind == "official":
            name = self.method_label if self.method not in ABSENT_METHODS else "MoCo"
            return _with_hash(f"{name} (official checkpoint, {details})", self.short_hash)
        if self.kind == "unknown":
            return _with_hash(f"unknown pretraining ({self.format}, {details})", self.short_hash)
        if self.kind == "released":
            return _with_hash(f"{self.method_label} ({self.released_details})", self.short_hash)
        return _with_hash(f"{self.method_label} ({details})", self.short_hash)

    @property
    def released_details(self) -> str:
        """"R50, dino-full, teacher": the arch (with a ViT's registers: "ViT-S/14 reg4"), the file's layout, the
        encoder read, and where it applies that the user named the method and that the input was not normalised."""
        parts = [published_backbone(self.arch, self.registers), self.format, self.encoder or ""]
        if self.stated_by == NAMED:
            parts.append("method named by --weights-format")
        if self.normalisation == "none":
            parts.append("unnormalised input")
        return ", ".join(p for p in parts if p)

    def sort_key(self) -> tuple[Any, ...]:
        """Random init first, then the supervised rows (the floor and the reference), then the methods' rows
        grouped by method and backbone, then rows whose method is unknown."""
        if self.kind == "random":
            group = 0
        elif self.is_supervised:
            group = 1
        elif self.kind == "unknown":
            group = 3
        else:
            group = 2
        by_method = (method_rank(self.method), self.arch) if group == 2 else ((0, ""), "")
        return (group, *by_method, KIND_ORDER.index(self.kind), method_rank(self.method), self.arch, self.data or "",
                self.epochs or 0, self.partial_steps, self.planned_epochs or 0, self.sha256 or "", self.source)


# MoCo v3's ViTs (moco_core/model/vit.py VIT_SHAPES) as papers write them: size, then the patch size. ViT-S and ViT-B as
# arXiv 2104.02057; Ti for DeiT's tiny shape (width 192, 12 blocks, 3 heads; arXiv 2012.12877); "nano" is ours.
VIT_NAMES = {"vit_small": "ViT-S/16", "vit_base": "ViT-B/16", "vit_tiny_p4": "ViT-Ti/4", "vit_nano_p4": "ViT-nano/4"}


VIT_SIZE_LETTERS = {"tiny": "Ti", "small": "S", "base": "B", "large": "L", "huge": "H", "giant": "g"}
_VIT_ARCH = re.compile(r"vit_(tiny|small|base|large|huge|giant)(?:_p(\d+))?")


def published_backbone(arch: str, registers: int = 0) -> str:
    """The published ``backbone`` of one of our archs: "R50", "ViT-S/14", "ViT-S/14 reg4" (DINOv2 with registers)."""
    return short_arch(arch) + (f" reg{registers}" if registers else "")


def short_arch(arch: str) -> str:
    """resnet50 -> R50, wide_resnet50_2 -> R50w2, vit_small -> ViT-S/16, vit_small_p14 -> ViT-S/14 (DINOv2's),
    resnet18_cifar -> R18 (CIFAR stem); anything else unchanged."""
    if arch in VIT_NAMES:
        return VIT_NAMES[arch]
    if arch.endswith("_cifar"):
        return f"{short_arch(arch.removesuffix('_cifar'))} (CIFAR stem)"
    vit = _VIT_ARCH.fullmatch(arch)
    if vit:
        return f"ViT-{VIT_SIZE_LETTERS[vit.group(1)]}/{vit.group(2) or 16}"
    if arch.startswith("resnet") and arch[6:].isdigit():
        return f"R{arch[6:]}"
    if arch.startswith("wide_resnet") and "_" in arch[11:]:
        depth, width = arch[11:].split("_", 1)
        return f"R{depth}w{width}"
    return arch


def method_name(method: str | None) -> str:
    return METHOD_NAMES.get(method or "", method or "unknown")


def moco_variant(config: dict[str, Any]) -> str | None:
    """"v1" or "v2": which of MoCo's recipes a method-moco pretraining config is. v2 is v1 with an MLP head, blur
    in the augmentation and a cosine lr schedule (arXiv 2003.04297, Table 1: "MLP", "aug+", "cos"): all three make
    v2, none v1. A mix of them (the paper's ablations), or a config that does not say (records written by hand,
    official checkpoints), names no version: its label says "MoCo"."""
    model, augment, optim = (config.get(k) if isinstance(config.get(k), dict) else {} for k in
                             ("model", "augment", "optim"))
    mlp, blur, schedule = model.get("mlp"), augment.get("blur_prob"), optim.get("schedule")
    if not isinstance(mlp, bool) or isinstance(blur, bool) or not isinstance(blur, int | float):
        return None
    if mlp and blur > 0 and schedule == "cosine":
        return "v2"
    if not mlp and blur == 0 and schedule == "step":
        return "v1"
    return None


def method_rank(method: str | None) -> tuple[int, str]:
    return (METHOD_ORDER.index(method), "") if method in METHOD_ORDER else (len(METHOD_ORDER), method or "")


def data_name(path: str | None) -> str | None:
    """The readable name of a dataset path: "embedded" stays, a directory becomes its last component."""
    if not path:
        return None
    if path == "embedded":
        return path
    return Path(path.rstrip("/\\")).name or path


def _with_hash(text: str, short: str) -> str:
    return f"{text} {short}" if short else text


RECIPE_IGNORES = ("run", "data.workers", "data.verify_images", "data.knn_path")  # where, how: not what was trained
# Fields added with MoCo v3 (issue 34) and the value at which each changes nothing: left out there, as the v3
# section of a run of another method, so that v1/v2 configs, and records written before the fields existed, keep
# the digests they had (reports/expected.csv's among them).
ADDED_NEUTRAL = {"augment.blur_prob_view2": None, "augment.solarize_prob": 0.0, "augment.solarize_prob_view2": None,
                 "optim.optimizer": "auto", "optim.warmup_epochs": 0}


# Likewise for the linear evaluation's config: the fields MoCo v3's protocol added, at v1/v2's values.
# And the detection fields the keypoint task added (transfer.detection.config.DetectorConfig), at the values every
# earlier
# detection run had: they change nothing in a VOC or COCO run.
EVAL_ADDED_NEUTRAL = {**ADDED_NEUTRAL, "optim.schedule": "step", "optim.scale_lr": False,
                      "detector.fpn_channels": 256, "detector.keypoint_pooler_resolution": 14,
                      "detector.keypoint_conv_dims": [512] * 8, "detector.min_keypoints_per_image": 1,
                      "detector.keypoint_oks_sigmas": []}
# ... and the subset fields of issue 36 (classification/subsets.py) at "every train label": a run on all labels
# keeps its digest
EVAL_ADDED_NEUTRAL.update({"data.labels": None, "data.subset": None, "data.subset_seed": 0})
# ... and the LVIS task's repeat-factor sampling (transfer/detection/sampling.py) at "off", as every VOC or COCO run
EVAL_ADDED_NEUTRAL.update({"data.repeat_threshold": 0.0})
# ... and the dense pose task's head (transfer.detection.config.DetectorConfig, DensePose's defaults), unused by the
# others
EVAL_ADDED_NEUTRAL.update({"detector.densepose_pooler_resolution": 28, "detector.densepose_num_convs": 8,
                           "detector.densepose_conv_dim": 512, "detector.densepose_heatmap_size": 112})


def recipe_digest(config: dict[str, Any], neutral: dict[str, Any] = ADDED_NEUTRAL) -> str:
    """A digest of what a pretraining trained: its config without RECIPE_IGNORES (and the ``neutral`` fields at
    their neutral values). Pretrainings of one recipe with different seeds (``moco trials``, ``moco demo
    --trials``) are trials of one row, whatever their weights."""
    kept = {section: dict(values) if isinstance(values, dict) else values for section, values in config.items()
            if section not in RECIPE_IGNORES and (section != "v3" or config.get("method") == "mocov3")}
    for name in RECIPE_IGNORES:
        section, _, key = name.partition(".")
        if key and isinstance(kept.get(section), dict):
            kept[section].pop(key, None)
    for name, value in neutral.items():
        section, _, key = name.partition(".")
        if isinstance(kept.get(section), dict) and key in kept[section] and kept[section][key] == value:
            del kept[section][key]
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


# The config field a sweep changes (sweeps.sweep.point_config): for end2end the dictionary is the batch; MoCo v3
# keeps its momentum under v3 (model.momentum is v1/v2's, which mocov3 configs refuse to set).
def swept_field(param: str, method: str) -> tuple[str, str]:
    if param == "momentum":
        return ("v3", "momentum") if method == "mocov3" else ("model", "momentum")
    return ("optim", "batch_size") if method == "end2end" else ("model", "queue_size")


def series_digest(config: dict[str, Any], param: str, method: str) -> str | None:
    """The recipe of a sweep's curve: the pretraining's config less its swept field (and less RECIPE_IGNORES)."""
    if not config:
        return None
    section, key = swept_field(param, method)
    values = config.get(section)
    kept = {**config, section: {k: v for k, v in values.items() if k != key}} if isinstance(values, dict) else config
    return recipe_digest(kept)
