"""Our checkpoints and the official MoCo ones: read as before, each saying what it is.

- MoCo v3 (ours, or the official moco-v3's): ``state_dict`` under ``module.base_encoder.*``; the base (query)
  encoder less its projector (``fc`` on a ResNet, ``head`` on a ViT), the key handling of the official
  main_lincls.py.
- MoCo v1/v2 (ours, or the official main_moco.py's) and our end-to-end and memory-bank runs: ``module.encoder_q.*``.
- Our supervised baseline: ``state_dict`` with torchvision's names and ``method: supervised``.

A method is the file's ``method`` field (ours), else the layout's: only the official MoCo code writes
``module.encoder_q.*`` with ``module.queue``, and ``module.base_encoder.*`` with ``module.momentum_encoder.*``.
"""

from __future__ import annotations

from typing import Any

from moco_core import checkpoint
from moco_core.model.weights import resnet_names, vit_names
from moco_core.model.weights.files import WeightsFile
from moco_core.model.weights.layout import Found, has_prefix, strip

QUERY_PREFIX = checkpoint.QUERY_PREFIX
BASE_PREFIX = checkpoint.BASE_PREFIX


def partial_epoch_steps(obj: dict[str, Any]) -> int:
    """Steps a mid-epoch checkpoint trained into the epoch after its ``epoch`` completed ones (its sampler
    position; 0 at an epoch's end): a run stopped in its third epoch holds epoch 2 and these steps."""
    position = obj.get("sampler", {}).get("position") if isinstance(obj.get("sampler"), dict) else None
    return position if isinstance(position, int) and not isinstance(position, bool) and position > 0 else 0


def _facts(obj: dict[str, Any], method: str) -> dict[str, Any]:
    """The record's pretraining facts, with the marks every record evaluated from these weights carries
    (moco_core/smoke.py): ``smoke``, written by a smoke run (shortened: numbers from it mean nothing; a checkpoint
    from before the field: its run.json says, :func:`moco_core.model.weights.detect.pretrain_facts`);
    ``unfinished``, stopped before the epochs its config planned (killed part-way, or a snapshot kept on the way)."""
    config = obj.get("config") if isinstance(obj.get("config"), dict) else {}
    epochs, steps = obj.get("epoch"), partial_epoch_steps(obj)
    planned = config.get("optim", {}).get("epochs") if isinstance(config.get("optim"), dict) else None
    known = all(isinstance(v, int) and not isinstance(v, bool) for v in (epochs, planned))
    return {"method": method, "epochs": epochs, "partial_epoch_steps": steps, "arch": obj.get("arch"),
            "config": config, "code_version": obj.get("code_version"), "smoke": obj.get("smoke") is True,
            "unfinished": bool(known and (epochs < planned or steps > 0))}


def read(weights: WeightsFile) -> Found | None:
    """Our checkpoints and the official MoCo v1/v2/v3 ones; None for any other layout."""
    obj = weights.obj
    state = obj.get("state_dict")
    ours = obj.get("format") == "moco-suite"
    stated = obj.get("method") if isinstance(obj.get("method"), str) else None
    if has_prefix(state, BASE_PREFIX):
        method = stated or "mocov3"
        backbone = strip(state, BASE_PREFIX, drop=("fc.", "head."))
        vit = None
        if vit_names.is_timm_vit(backbone):  # v3's ViT: 12 heads for ViT-S, the fixed sin-cos position embedding
            vit = vit_names.vit_spec(backbone, heads=vit_names.mocov3_heads(backbone), fixed_position=True)
        return Found("moco-suite" if ours else "official-mocov3", "a MoCo v3 checkpoint (module.base_encoder.*)",
                     backbone, method=method, encoder="query", vit=vit, facts=_facts(obj, method))
    if has_prefix(state, QUERY_PREFIX):
        method = stated or "moco"
        backbone = strip(state, QUERY_PREFIX, drop=("fc.",))
        return Found("moco-suite" if ours else "official-moco", "a MoCo checkpoint (module.encoder_q.*)", backbone,
                     method=method, encoder="backbone" if method == "supervised" else "query",
                     facts=_facts(obj, method))
    if isinstance(state, dict) and stated and resnet_names.is_resnet(state):
        # our supervised baseline: a torchvision ResNet's state_dict and the method that trained it
        backbone = strip(state, "", drop=("fc.",))
        return Found("torchvision", f"a {stated} checkpoint with torchvision's names", backbone, method=stated,
                     encoder="backbone", facts=_facts(obj, stated))
    return None
