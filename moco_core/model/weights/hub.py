"""``.safetensors`` files, as the Hugging Face hub keeps them: timm's (timm's names; its ResNets' equal
torchvision's) and transformers' (``ViTModel``, ``Dinov2Model``; the names of
:func:`moco_core.model.weights.vit_names.from_transformers`), with what ``config.json`` and
``preprocessor_config.json`` beside them say; and the ones ``moco convert`` writes, whose metadata states the
method, encoder and normalisation of the weights they were converted from.

A timm or transformers ViT file says its architecture, not the method that trained it (timm's hub holds DINO, MAE
and supervised ViTs alike): ``--weights-format`` names it; transformers' Dinov2Model is DINOv2's network, and its
file states the method as DINOv2's hub files do. Normalisation: the file's (timm's ``pretrained_cfg``, the
preprocessor's ``image_mean``/``image_std``) where it states one, else the method's.
"""

from __future__ import annotations

import math
import re
from typing import Any

from moco_core import checkpoint
from moco_core.errors import UserError
from moco_core.model.weights import dinov2, plain, resnet_names, vit_names
from moco_core.model.weights.files import WeightsFile
from moco_core.model.weights.formats import Normalisation
from moco_core.model.weights.layout import Found
from moco_core.user_files import parse_json

# the metadata keys moco convert writes into a .safetensors file (transfer/convert.py)
METADATA_METHOD, METADATA_ENCODER, METADATA_NORMALISATION = "moco.method", "moco.encoder", "moco.normalisation"
METADATA_HEADS = "moco.num_heads"  # a ViT's heads, which its weights do not hold
DINOV2_TYPES = ("dinov2", "dinov2_with_registers")


def read(weights: WeightsFile) -> Found | None:
    state, config = weights.obj, weights.config
    model_type = config.get("model_type")
    if isinstance(model_type, str) and any(".attention.attention.query." in k for k in state):
        found = _transformers(state, config, model_type)
    else:
        found = _timm(state)
    if found is None:
        return None
    stated = _stated_normalisation(weights)
    if stated is not None:
        found.normalisation = stated
    method = weights.metadata.get(METADATA_METHOD)
    if method:  # written by moco convert: the file says what it was converted from
        found.method, found.encoder = method, weights.metadata.get(METADATA_ENCODER) or found.encoder
        found.layout, found.description = "moco-convert", f"{found.description} written by moco convert"
        heads = weights.metadata.get(METADATA_HEADS, "")
        if found.vit is not None and heads:
            found.vit = vit_names.vit_spec(found.state, heads=_heads(heads, found.vit.embed_dim),
                                           dynamic=method == "dinov2", fixed_position=method == "mocov3")
    return found


def _heads(stated: str, width: int) -> int:
    """The heads ``moco.num_heads`` states: a whole number in ASCII digits up to the width (``str.isdigit`` takes
    ``²``, which ``int`` refuses, and 5,000 digits are past ``int``'s limit); one line otherwise."""
    if not re.fullmatch(r"[1-9][0-9]{0,5}", stated) or int(stated) > width:
        shown = stated[:20] + ("..." if len(stated) > 20 else "")
        raise checkpoint.CheckpointError(f"its metadata's {METADATA_HEADS} {shown!r} ({len(stated)} characters) is "
                                         f"no number of heads of a ViT of width {width} (1 to {width})")
    return int(stated)


def _timm(state: dict[str, Any]) -> Found | None:
    if not resnet_names.is_resnet(state):
        state = {k: v for k, v in state.items() if not k.startswith("head.")}  # a ViT's classifier
    found = plain.from_state(state, "")
    if found is not None:
        timm = found.layout in ("torchvision", "timm-vit")  # timm's ResNet names are torchvision's
        found.layout = "timm-safetensors" if timm else found.layout + "-safetensors"
        found.description = found.description.replace("state dict", "safetensors file")
    return found


def _transformers(state: dict[str, Any], config: dict[str, Any], model_type: str) -> Found | None:
    heads = config.get("num_attention_heads")
    heads = heads if isinstance(heads, int) and not isinstance(heads, bool) and heads > 0 else None
    eps = config.get("layer_norm_eps")
    eps = float(eps) if isinstance(eps, int | float) and not isinstance(eps, bool) and eps > 0 else 1e-12
    timm_state = vit_names.from_transformers(state)
    if model_type in DINOV2_TYPES:
        return dinov2.from_names(timm_state, "transformers-dinov2", f"a transformers {model_type} safetensors file",
                                 heads=heads, norm_eps=eps)
    if model_type != "vit":
        raise checkpoint.CheckpointError(f"a transformers {model_type!r} model: only ViTModel ('vit') and "
                                         f"Dinov2Model ('dinov2') files are read")
    spec = vit_names.vit_spec(timm_state, heads=heads, norm_eps=eps)
    return Found("transformers-vit", "a transformers ViT safetensors file", timm_state, vit=spec,
                 candidates=plain.VIT_CANDIDATES)


def _stated_normalisation(weights: WeightsFile) -> Normalisation | None:
    """The input statistics the file states: moco convert's metadata, timm's ``pretrained_cfg``, or transformers'
    preprocessor; None where none is stated."""
    if METADATA_NORMALISATION in weights.metadata:
        try:  # a number past 64 bits or a double is malformed here too, not a ValueError from int()
            given = parse_json(weights.metadata[METADATA_NORMALISATION], what="")
        except UserError:
            given = None
        return _normalisation(given, "stated by the file") if isinstance(given, dict) else None
    pretrained = weights.config.get("pretrained_cfg")
    if isinstance(pretrained, dict):
        return _normalisation(pretrained, "timm's pretrained_cfg")
    if weights.preprocessor:
        pre = weights.preprocessor
        return _normalisation({"mean": pre.get("image_mean"), "std": pre.get("image_std")}, "its preprocessor")
    return None


def _normalisation(given: dict[str, Any], name: str) -> Normalisation | None:
    mean, std = given.get("mean"), given.get("std")
    ok = all(isinstance(v, list) and len(v) == 3 and all(isinstance(x, int | float) and not isinstance(x, bool)
                                                          for x in v) for v in (mean, std))
    if not ok:
        return None
    if not all(math.isfinite(x) for x in (*mean, *std)):  # NaN and Infinity parse as JSON constants
        raise checkpoint.CheckpointError(f"the file's normalisation ({name}) is not finite: mean {mean}, std {std}")
    if any(x <= 0 for x in std):
        raise checkpoint.CheckpointError(f"the file's normalisation ({name}) has a std of {std}: not > 0")
    return Normalisation(given.get("name") if isinstance(given.get("name"), str) else name,
                         tuple(float(x) for x in mean), tuple(float(x) for x in std))  # type: ignore[arg-type]
