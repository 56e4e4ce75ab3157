"""MAE (facebookresearch/mae, arXiv 2111.06377): ``{'model': ...}`` with timm's ViT names.

- ``mae_pretrain_vit_{base,large,huge}.pth``: the encoder alone, no ``head``. A ``{'model'}`` of timm's ViT names is
  also what DeiT-style converters write (MoCo v3's ``convert_to_deit.py``): it needs ``--weights-format mae``.
- The full training checkpoint (and ``mae_visualize_*.pth``) holds the decoder too (``decoder_embed``,
  ``decoder_blocks``, ``decoder_pred``, and the decoder's ``mask_token``): MAE's own, the file states the method;
  the encoder is read. A training checkpoint pickles ``args`` (an ``argparse.Namespace``), read as an inert
  stand-in.
"""

from __future__ import annotations

from moco_core.model.weights import vit_names
from moco_core.model.weights.files import WeightsFile, tensors_only
from moco_core.model.weights.layout import Found

_DECODER = ("decoder_", "mask_token")


def read(weights: WeightsFile) -> Found | None:
    obj = weights.obj
    model = tensors_only(obj.get("model"))
    if not vit_names.is_timm_vit(model) or any(k.startswith("head.") for k in model):
        return None  # with a head: a fine-tuned classifier, not a pretrained encoder
    encoder = {k: v for k, v in model.items() if not k.startswith(_DECODER)}
    spec = vit_names.vit_spec(encoder)
    if any(k.startswith("decoder_") for k in model):
        epoch = obj.get("epoch") if isinstance(obj.get("epoch"), int) else None
        return Found("mae-full", "an MAE checkpoint with its decoder", encoder, method="mae", encoder="encoder",
                     vit=spec, facts={"epochs": epoch})
    return Found("timm-vit-model", "a {'model': ...} of timm's ViT names without a head", encoder, vit=spec,
                 candidates=("mae", "mocov3", "dino"))
