"""Reading a weights file without running anything in it: safetensors where the file is one, ``weights_only``
pickles otherwise.

Training checkpoints of other codebases pickle a few objects beside their tensors: DINO's and MAE's full
checkpoints the script's ``argparse.Namespace`` (``args``), Barlow Twins' ``checkpoint.pth`` the function its
LARS optimizer filters parameters with (``__main__.exclude_bias_and_norm``, in the optimizer's param groups). Each
of those few names, and only they, is read as :class:`PickledObject`, an inert stand-in (no code of argparse or of
the script is imported or run: the unpickler builds the stand-in and sets its ``__dict__``); any other global
still refuses the file, naming what it would call. The readers take tensors only, never a stand-in's content.

Beside a ``.safetensors`` file, the Hugging Face hub keeps ``config.json`` (timm's: ``architecture``,
``pretrained_cfg.mean/std``; transformers': ``model_type``, ``num_attention_heads``, ``layer_norm_eps``) and, for
transformers, ``preprocessor_config.json`` (``image_mean``, ``image_std``). They are read when present, as what
the file says about itself.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from moco_core import checkpoint
from moco_core.user_files import read_json, regular_file

# the globals read as stand-ins, and who pickles them
STAND_IN_NAMES = (
    "argparse.Namespace",  # DINO's and MAE's full checkpoints: {'args': Namespace(...)}
    "__main__.exclude_bias_and_norm",  # Barlow Twins' checkpoint.pth: LARS's filter in the optimizer's groups
)
CONFIG_LIMIT = 1 << 20  # bytes of a config.json: they are a few kB


class PickledObject:
    """An object a training script pickled, kept as data: its attributes, nothing of its class. Calling or
    building it runs nothing of the original (argparse.Namespace's attributes land in ``__dict__``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # a pickle's REDUCE on it constructs nothing
        del args, kwargs


STAND_INS = tuple((PickledObject, name) for name in STAND_IN_NAMES)


@dataclass
class WeightsFile:
    """What a file holds, read safely: a pickled dict, or the tensors of a safetensors file and what is beside."""

    path: Path
    kind: str  # "pickle" or "safetensors"
    obj: dict[str, Any]  # the pickled dict, or the safetensors tensors by name
    metadata: dict[str, str] = field(default_factory=dict)  # safetensors' header metadata
    config: dict[str, Any] = field(default_factory=dict)  # config.json beside a safetensors file
    preprocessor: dict[str, Any] = field(default_factory=dict)  # preprocessor_config.json beside it


def is_safetensors(path: Path) -> bool:
    """Whether ``path`` starts as a safetensors file does: an 8-byte little-endian header length, then JSON."""
    try:
        with path.open("rb") as f:
            head = f.read(9)
    except OSError:
        return False
    if len(head) < 9:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return head[8:9] == b"{" and 2 <= length <= path.stat().st_size - 8


def read_file(path: Path) -> WeightsFile:
    """The file's content: safetensors (with the JSON beside it) or a weights-only pickle with the stand-ins."""
    regular_file(path, what="checkpoint", error=checkpoint.CheckpointError)  # a FIFO would wait, a device not end
    if path.suffix == ".safetensors" or is_safetensors(path):
        return _read_safetensors(path)
    return WeightsFile(path, "pickle", checkpoint.load(path, stand_ins=STAND_INS))


def _read_safetensors(path: Path) -> WeightsFile:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            tensors = {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 - safe_open is no mapping
            metadata = dict(f.metadata() or {})
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise checkpoint.CheckpointError(f"{path}: not a readable safetensors file (truncated or corrupt?): "
                                         f"{first[:200]}") from None
    beside = {name: json_beside(path, name) for name in ("config.json", "preprocessor_config.json")}
    return WeightsFile(path, "safetensors", tensors, metadata, beside["config.json"],
                       beside["preprocessor_config.json"])


def json_beside(path: Path, name: str) -> dict[str, Any]:
    """The JSON object in the file ``name`` beside ``path``, {} where there is none. One that is there but no
    regular file (a FIFO, a device, a folder, a dangling link) is refused in one line, as the weights file itself
    would be (:func:`moco_core.user_files.regular_file`): read, a FIFO waits for ever; skipped, what the weights
    are said to be would change without a word."""
    other = path.with_name(name)
    if not other.exists() and not other.is_symlink():
        return {}
    found = read_json(other, limit=CONFIG_LIMIT, what=name, error=checkpoint.CheckpointError)
    if not isinstance(found, dict):
        raise checkpoint.CheckpointError(f"{other}: expected a JSON object beside {path.name}")
    return found


def tensors_only(state: Any) -> dict[str, torch.Tensor]:
    """The tensor entries of a state dict (anything else a wrapper keeps beside them is left out)."""
    if not isinstance(state, dict):
        return {}
    return {k: v for k, v in state.items() if isinstance(k, str) and isinstance(v, torch.Tensor)}
