"""Barlow Twins (facebookresearch/barlowtwins, arXiv 2103.03230).

- ``resnet50.pth`` (the hub's): the backbone's state dict with torchvision's names and no ``fc`` (main.py saves
  ``model.module.backbone``, whose fc is an identity). Nothing in it says Barlow Twins: read by :mod:`plain`, it
  needs ``--weights-format barlowtwins``.
- ``checkpoint.pth``: ``{epoch, model, optimizer}``, ``model`` the DDP-wrapped ``BarlowTwins``:
  ``module.backbone.*``, ``module.projector.*`` and ``module.bn`` (the projector output's batch norm without
  affine parameters, which normalises the cross-correlation of the loss): that module is the method's, the file
  states it. Its LARS optimizer pickles the function ``exclude_bias_and_norm``, read as an inert stand-in.
"""

from __future__ import annotations

from moco_core.model.weights import resnet_names
from moco_core.model.weights.files import WeightsFile
from moco_core.model.weights.layout import Found, has_prefix, strip


def read(weights: WeightsFile) -> Found | None:
    obj = weights.obj
    model = obj.get("model")
    if not (isinstance(model, dict) and has_prefix(model, "module.backbone.") and has_prefix(model, "module.projector.")
            and "module.bn.running_mean" in model and "module.bn.weight" not in model):
        return None
    backbone = strip(model, "module.backbone.", drop=("fc.",))
    if not resnet_names.is_resnet(backbone):
        return None
    epoch = obj.get("epoch") if isinstance(obj.get("epoch"), int) else None
    return Found("barlowtwins-full", "a Barlow Twins checkpoint (backbone, projector, bn)", backbone,
                 method="barlowtwins", encoder="backbone", facts={"epochs": epoch})
