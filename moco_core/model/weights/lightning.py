"""PyTorch Lightning checkpoints of solo-learn and lightly: ``{'state_dict': ..., 'epoch', 'global_step',
'pytorch-lightning_version', ...}``.

- solo-learn (vturrisi/solo-learn): ``backbone.*`` with torchvision's ResNet names (the online network of its
  momentum methods: ``momentum_backbone.*`` is the other), beside ``projector.*`` and the method's heads. Its
  CIFAR models have a 3x3 conv1 of stride 1 and no max-pool, and were trained on its CIFAR statistics
  (``solo/data/classification_dataloader.py``: mean (0.4914, 0.4822, 0.4465), std (0.247, 0.243, 0.261)); its
  ImageNet ones on timm's ImageNet statistics. Its ``Checkpointer`` writes the run's arguments to ``args.json``
  beside the checkpoint: its ``method`` states the method where it is one of ours.
- lightly (lightly-ai/lightly): ``backbone.*`` of the user's module; its examples' ResNet is
  ``nn.Sequential(*resnet.children()[:-1])`` (``backbone.0.weight`` is conv1, ``backbone.4.*`` layer1) and its
  ViTs wrap timm's as ``backbone.vit.*``. Nothing states the method.
"""

from __future__ import annotations

from pathlib import Path

from moco_core.model.weights import resnet_names, vit_names
from moco_core.model.weights.files import WeightsFile, json_beside
from moco_core.model.weights.formats import CIFAR, IMAGENET
from moco_core.model.weights.layout import Found, strip

# solo-learn's method names (its --method / cfg.method) that are one of ours
SOLO_METHODS = {"byol": "byol", "barlow_twins": "barlowtwins", "dino": "dino", "swav": "swav", "mocov3": "mocov3",
                "deepclusterv2": "deepcluster-v2"}
# the network its backbone.* is, by method (its momentum methods' online network; DINO's student)
SOLO_ENCODERS = {"byol": "online", "mocov3": "query", "dino": "student"}


def read(weights: WeightsFile) -> Found | None:
    obj, path = weights.obj, weights.path
    state = obj.get("state_dict")
    if not (isinstance(state, dict) and ("pytorch-lightning_version" in obj or "global_step" in obj)):
        return None
    backbone = strip(state, "backbone.", drop=("fc.",))
    if resnet_names.is_resnet(backbone):
        method = _solo_method(path)
        stem = resnet_names.stem_of(backbone)
        return Found("solo-learn", "a solo-learn Lightning checkpoint (backbone.*)", backbone, method=method,
                     candidates=() if method else tuple(SOLO_METHODS.values()), stem=stem,
                     encoder=SOLO_ENCODERS.get(method or "", "backbone"),
                     normalisation=CIFAR if stem == "cifar" else IMAGENET,
                     facts={"epochs": obj.get("epoch") if isinstance(obj.get("epoch"), int) else None})
    children = resnet_names.from_children(backbone)
    if children is not None:
        return Found("lightly", "a lightly Lightning checkpoint (backbone as nn.Sequential of a ResNet)", children,
                     candidates=("byol", "simclr-v1", "barlowtwins", "dino", "swav", "moco"))
    vit = strip(state, "backbone.vit.", drop=("head.",))
    if vit_names.is_timm_vit(vit):
        return Found("lightly", "a lightly Lightning checkpoint (backbone.vit.*)", vit, vit=vit_names.vit_spec(vit),
                     candidates=("dino", "mae", "mocov3"))
    return None


def _solo_method(path: Path) -> str | None:
    """The method solo-learn's ``args.json`` beside the checkpoint names, where it is one of ours."""
    method = json_beside(path, "args.json").get("method")
    return SOLO_METHODS.get(method) if isinstance(method, str) else None
