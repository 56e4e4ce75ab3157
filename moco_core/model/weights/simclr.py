"""SimCLR's TensorFlow checkpoints as the public converters write them (google-research/simclr's weights are
TensorFlow; these are their PyTorch copies). Both expect pixels in [0, 1], not normalised.

- v1, tonylins/simclr-converter: ``{'state_dict': ResNet}`` with torchvision's names and the ``fc`` of the
  supervised linear head trained beside (its ``resnet_wider`` at width 1 is torchvision's ResNet-50). A
  ``state_dict`` of torchvision's names is any codebase's wrapper: read by :mod:`plain`, it needs
  ``--weights-format simclr-v1``.
- v2, Separius/SimCLRv2-Pytorch: ``{'resnet': ..., 'head': ...}`` with its own names
  (:func:`moco_core.model.weights.resnet_names.from_simclr_v2`): that converter's layout, the file states the
  method. Width 1 without selective kernels (``r50_1x_sk0``) only: the others are no torchvision ResNet, and the
  strict load names their keys.
"""

from __future__ import annotations

from moco_core.model.weights import resnet_names
from moco_core.model.weights.files import WeightsFile, tensors_only
from moco_core.model.weights.formats import UNNORMALISED
from moco_core.model.weights.layout import Found


def read(weights: WeightsFile) -> Found | None:
    obj = weights.obj
    resnet = obj.get("resnet")
    if not (isinstance(resnet, dict) and isinstance(obj.get("head"), dict) and "net.0.0.weight" in resnet):
        return None
    backbone = resnet_names.from_simclr_v2(tensors_only(resnet))
    return Found("simclr-v2-converted", "a SimCLR v2 checkpoint as Separius/SimCLRv2-Pytorch converts it", backbone,
                 method="simclr-v2", encoder="backbone", normalisation=UNNORMALISED)
