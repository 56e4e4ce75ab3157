"""A ResNet backbone in detectron2's naming, written as the ``.pkl`` its ``DetectionCheckpointer`` reads.

detectron2 names a torchvision ResNet's parameters differently: the stem is ``stem.conv1`` with its norm
inside the conv (``stem.conv1.norm``), stages ``layer1..4`` are ``res2..5``, ``bnK`` is ``convK.norm`` and the
projection shortcut is ``shortcut`` (+ ``shortcut.norm``). The mapping is the one of the official MoCo
``detection/convert-pretrain-to-detectron2.py``; ``matching_heuristics`` tells detectron2 to match the remaining
names (e.g. our ``res5`` into the C4 ROI head) by suffix. Arrays are stored as numpy, as detectron2 expects.

Deviation from the official code: the fc (and MLP head) weights are dropped instead of written as ``stem.fc.*``
(detectron2 ignores them either way), and the file is read back with a restricted unpickler that only builds
numpy arrays, so a converted file can be checked without trusting it.
"""

from __future__ import annotations

import json
import os
import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from moco_core.checkpoint import CheckpointError, write_atomic
from moco_core.model.weights import hub
from moco_core.model.weights.detect import Weights, read_weights, resolve_path
from moco_core.model.weights.resnet_names import CIFAR_SUFFIX
from moco_core.pickles import DAMAGED, RefusedGlobal, load_plain

AUTHOR = "moco"
PICKLE_PROTOCOL = 4  # arrays pickle as _reconstruct + state (protocol 5 would need numpy's _frombuffer)

_STAGE = re.compile(r"^layer([1-4])$")
_RES = re.compile(r"^res([2-5])$")
_BN = re.compile(r"^bn([1-3])$")
_CONV = re.compile(r"^conv([1-3])$")


def _torchvision_to_d2_key(key: str) -> str:
    parts = key.split(".")
    stage = _STAGE.match(parts[0])
    if stage:
        head, rest = [f"res{int(stage.group(1)) + 1}"], parts[1:]
    elif parts[0] in ("conv1", "bn1"):
        head, rest = ["stem"], parts  # conv1/bn1 outside the stages form the stem
    else:
        raise CheckpointError(f"unexpected backbone key {key!r}: not part of a torchvision ResNet")
    out: list[str] = []
    i = 0
    while i < len(rest):
        part = rest[i]
        bn = _BN.match(part)
        if bn:
            out += [f"conv{bn.group(1)}", "norm"]
        elif part == "downsample" and i + 1 < len(rest) and rest[i + 1] in ("0", "1"):
            out += ["shortcut"] if rest[i + 1] == "0" else ["shortcut", "norm"]
            i += 1
        else:
            out.append(part)
        i += 1
    return ".".join(head + out)


def _d2_to_torchvision_key(key: str) -> str:
    parts = key.split(".")
    res = _RES.match(parts[0])
    if parts[0] == "stem":
        head: list[str] = []
    elif res:
        head = [f"layer{int(res.group(1)) - 1}"]
    else:
        raise CheckpointError(f"unexpected detectron2 key {key!r}: expected stem.* or res2..res5.*")
    out: list[str] = []
    rest = parts[1:]
    i = 0
    while i < len(rest):
        part = rest[i]
        conv = _CONV.match(part)
        if conv and i + 1 < len(rest) and rest[i + 1] == "norm":
            out.append(f"bn{conv.group(1)}")
            i += 1
        elif part == "shortcut":
            norm = i + 1 < len(rest) and rest[i + 1] == "norm"
            out += ["downsample", "1" if norm else "0"]
            i += int(norm)
        else:
            out.append(part)
        i += 1
    return ".".join(head + out)


def to_detectron2(state: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """A torchvision ResNet state_dict (no prefix) in detectron2's names, as numpy arrays; ``fc.*`` is dropped.

    ``conv1.weight`` -> ``stem.conv1.weight``, ``bn1.*`` -> ``stem.conv1.norm.*``, ``layer1.0.bn2.weight`` ->
    ``res2.0.conv2.norm.weight``, ``layer2.0.downsample.{0,1}.*`` -> ``res3.0.shortcut{,.norm}.*``.
    """
    return {_torchvision_to_d2_key(k): v.detach().cpu().numpy() for k, v in state.items() if not k.startswith("fc.")}


def from_detectron2(model: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Inverse of :func:`to_detectron2`: detectron2 backbone names (numpy or tensors) to a torchvision state_dict."""
    return {_d2_to_torchvision_key(k): torch.as_tensor(np.asarray(v)) for k, v in model.items()}


def write_detectron2_pkl(model: dict[str, np.ndarray], dst: Path) -> None:
    """Write ``{"model", "__author__", "matching_heuristics"}`` atomically (temporary file, fsync, rename)."""
    obj = {"model": model, "__author__": AUTHOR, "matching_heuristics": True}
    write_atomic(dst, lambda f: pickle.dump(obj, f, protocol=PICKLE_PROTOCOL), what="detectron2 file")


# --to, and the file suffix a folder destination gets. timm: a ViT backbone's state_dict less its head, which
# timm's ViT of the same shape loads (num_heads=12 for v3's ViT-S): the DeiT fine-tuning path the official moco-v3
# convert_to_deit.py serves. A destination ending in .safetensors is written as safetensors (torchvision or timm
# names), with the method, encoder and normalisation in its metadata: read back, it says what it is.
FORMATS = {"detectron2": ".pkl", "torchvision": ".pth", "timm": ".pth"}


def destination(src: Path, dst: str | Path, to: str) -> Path:
    """The file ``convert`` writes: ``dst``, or a file named after ``src`` inside ``dst`` when it is a folder (or
    is written as one, ``out/``). Its folder must exist: a typo in it is refused rather than created."""
    text = str(dst)
    path = Path(text)
    if path.is_dir() or text.endswith(("/", os.sep)):
        if not path.is_dir():
            raise CheckpointError(f"{text}: no such folder; create it, or name the file to write")
        stem = src.name.removesuffix(".tar").removesuffix(".pth").removesuffix(".pkl") or "backbone"
        return path / f"{stem}{FORMATS[to]}"
    if not path.parent.is_dir():
        raise CheckpointError(f"{path.parent}: no such folder; create it first, or choose another destination")
    return path


def convert_file(src: Path, dst: str | Path, *, overwrite: bool = False, to: str = "detectron2",
                 weights_format: str | None = None) -> dict[str, Any]:
    """Convert any weights file :mod:`moco_core.model.weights` reads into a backbone file at ``dst`` (see
    :func:`destination`): detectron2's ``.pkl`` (``to="detectron2"``, the official conversion's mapping) or a
    torchvision ResNet state_dict (``to="torchvision"``; ``torchvision.models.<arch>().load_state_dict(sd,
    strict=False)`` loads it and reports exactly ``fc.weight`` and ``fc.bias`` missing), or for a ViT a timm
    state_dict (``to="timm"``; timm's ViT of the same shape reports exactly ``head.weight`` and ``head.bias``
    missing). ``weights_format``: the method of a file that does not say (--weights-format).

    ``src`` may be a pretraining's run directory (its last checkpoint). Returns a summary: source, destination,
    arch, source format, method, encoder, normalisation, number of arrays written, sha256 of ``src``.
    Every failure is a one-line ``CheckpointError``. ``dst`` is never ``src`` itself (the pretraining checkpoint
    would be replaced by the smaller backbone file), and an existing ``dst`` is replaced only with ``overwrite``.
    """
    if to not in FORMATS:
        raise CheckpointError(f"--to: expected one of {', '.join(FORMATS)}, got {to!r}")
    src = resolve_path(src)  # a pretraining's run directory: its last checkpoint
    dst = destination(src, dst, to)
    if dst.exists() and src.exists() and dst.samefile(src):
        raise CheckpointError(f"{dst}: is the checkpoint being converted; write the backbone somewhere else")
    if dst.exists() and not overwrite:
        raise CheckpointError(f"{dst}: already exists; pass --force to replace it, or choose another name")
    weights = read_weights(src, weights_format)
    vit = weights.found.vit
    if (vit is not None) != (to == "timm"):
        what = f"a ViT ({weights.arch}): convert it --to timm" if vit else "a ResNet: convert it --to torchvision " \
            "or --to detectron2"
        raise CheckpointError(f"{src}: holds {what}")
    if to == "detectron2" and weights.arch.endswith(CIFAR_SUFFIX):
        raise CheckpointError(f"{src}: holds a CIFAR-stem ResNet ({weights.arch}), which no detectron2 backbone "
                              f"takes; convert it --to torchvision")
    summary = {"source": str(src), "destination": str(dst), "to": to, "arch": weights.arch,
               "format": weights.found.layout, "method": weights.method, "encoder": weights.encoder,
               "normalisation": weights.normalisation.name}
    if to in ("torchvision", "timm"):
        plain = {key: value.contiguous().clone() for key, value in weights.state.items()}  # no views into the file
        if dst.suffix == ".safetensors":
            from safetensors.torch import save

            data = save(plain, metadata=_metadata(weights))
            write_atomic(dst, lambda f: f.write(data), what="safetensors file")
        else:
            write_atomic(dst, lambda f: torch.save(plain, f), what="state_dict")
        tensors = len(plain)
    else:
        model = to_detectron2(weights.state)
        write_detectron2_pkl(model, dst)
        tensors = len(model)
    return {**summary, "tensors": tensors, "sha256": weights.sha256}


def _metadata(weights: Weights) -> dict[str, str]:
    """What a converted .safetensors file says of itself (moco_core.model.weights.hub reads it back)."""
    meta = {hub.METADATA_METHOD: weights.method, hub.METADATA_ENCODER: weights.encoder,
            hub.METADATA_NORMALISATION: json.dumps(weights.normalisation.record()),
            "moco.arch": weights.arch, "moco.source_sha256": weights.sha256, "format": "pt"}
    if weights.found.vit is not None:
        meta[hub.METADATA_HEADS] = str(weights.found.vit.num_heads)
    return meta


def load_detectron2_pkl(path: Path) -> dict[str, Any]:
    """Read a detectron2 ``.pkl`` without running code: only numpy arrays can be built.

    Raises a one-line ``CheckpointError`` for missing or corrupt files, any other global (naming it), and
    files that are not a dict with a ``model`` dict.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"not found: {path}")
    try:
        obj = load_plain(path.read_bytes())
    except RefusedGlobal as err:
        text = " ".join(f"refused global {err.qualname}".split())[:200]
        raise CheckpointError(f"{path}: {text}; only numpy arrays may be unpickled") from None
    except (*DAMAGED, OSError) as err:
        text = " ".join(str(err).split())[:200] or type(err).__name__
        raise CheckpointError(f"{path}: not a readable pickle (truncated or corrupt?): {text}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("model"), dict):
        raise CheckpointError(f"{path}: expected a dict with a 'model' dict, found {type(obj).__name__}")
    return obj
