"""DINO's files (facebookresearch/dino, arXiv 2104.14294).

- Backbone only, ``dino_*_pretrain.pth``: the teacher's backbone as a flat state dict, timm's ViT names or
  torchvision's ResNet names without ``fc``. Nothing in it says DINO: it is read by :mod:`plain`, as any such
  file, and needs ``--weights-format dino``.
- Full checkpoint, ``*_full_checkpoint.pth``: ``{student, teacher, optimizer, epoch, args, dino_loss,
  fp16_scaler}``, the networks under ``backbone.*`` and ``head.*`` (ViT; saved from the teacher, which is not
  wrapped in DDP) or ``module.backbone.*`` (ResNet; its student and teacher are). Its ``dino_loss`` (the
  centre) is DINO's own: the file states the method. The teacher is read, as DINO's evaluations do
  (``--checkpoint_key teacher``). ``args`` is an ``argparse.Namespace``, read as an inert stand-in
  (:mod:`moco_core.model.weights.files`).
"""

from __future__ import annotations

from moco_core.model.weights import resnet_names, vit_names
from moco_core.model.weights.files import WeightsFile
from moco_core.model.weights.layout import Found, has_prefix, strip


def read(weights: WeightsFile) -> Found | None:
    obj = weights.obj
    teacher = obj.get("teacher")
    if not (isinstance(teacher, dict) and "student" in obj and "dino_loss" in obj):
        return None
    for prefix in ("module.backbone.", "backbone."):
        if has_prefix(teacher, prefix):
            backbone = strip(teacher, prefix, drop=("fc.", "head."))
            break
    else:
        backbone = {}
    epoch = obj.get("epoch") if isinstance(obj.get("epoch"), int) else None
    facts = {"epochs": epoch}
    vit = vit_names.vit_spec(backbone) if vit_names.is_timm_vit(backbone) else None
    if vit is None and not resnet_names.is_resnet(backbone):
        backbone = strip(teacher, "")  # neither: the strict load names what is there
    return Found("dino-full", "a DINO full checkpoint (student, teacher, dino_loss)", backbone, method="dino",
                 encoder="teacher", vit=vit, facts=facts)
