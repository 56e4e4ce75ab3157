"""SwAV, DeepCluster-v2 and SeLa-v2 (facebookresearch/swav, arXiv 2006.09882): ``*_pretrain.pth.tar``.

A state dict (bare, or under ``state_dict``) of the DDP-wrapped model: ``module.`` + torchvision's ResNet names (its
stem pads by 1 then convolves with padding 2: the same as torchvision's padding 3), ``module.projection_head.*`` and
the prototypes, ``module.prototypes.weight`` (one set) or ``module.prototypes.prototypesN.weight`` (several). The
three methods are trained by one codebase into this one layout (its README's model zoo): the file does not say
which, and ``--weights-format swav``, ``deepcluster-v2`` or ``sela-v2`` says it.
"""

from __future__ import annotations

from moco_core.model.weights import resnet_names
from moco_core.model.weights.files import WeightsFile
from moco_core.model.weights.layout import Found, has_prefix, strip

METHODS = ("swav", "deepcluster-v2", "sela-v2")


def read(weights: WeightsFile) -> Found | None:
    obj = weights.obj
    state = obj.get("state_dict") if isinstance(obj.get("state_dict"), dict) else obj
    if not (has_prefix(state, "module.prototypes") and has_prefix(state, "module.conv1.")):
        return None
    backbone = strip(state, "module.", drop=("projection_head.", "prototypes.", "fc."))
    if not resnet_names.is_resnet(backbone):
        return None
    sets = sum(1 for k in state if isinstance(k, str) and k.startswith("module.prototypes") and k.endswith("weight"))
    return Found("swav", f"a SwAV-codebase checkpoint ({sets} prototype set{'s' if sets > 1 else ''})", backbone,
                 candidates=METHODS, allowed=METHODS)
