"""Default run directories of the evaluations, named after the preset, the data and the weights, so that two
evaluations typed one after the other (README: the MoCo checkpoint, then random init, with the same preset; the
same preset on README's CIFAR-10, then on one's own folder) never land in one directory. Lightning names its runs
by version, detectron2 by an OUTPUT_DIR the user sets; here the name says what ran:
``runs/lincls_embedded/embedded``, ``runs/lincls_embedded/random_resnet18``, ``runs/voc_R50_C4_24k/CKPT``,
``runs/lincls_mocov3_32px_digits/random_resnet18`` (``--data ~/digits``).

Torch-free: the CLI resolves these before anything heavy loads.
"""

from __future__ import annotations

import re
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
_SUFFIXES = (".tar", ".pth", ".pt", ".pkl", ".ckpt", ".bin", ".safetensors")
_LAST = ("checkpoint_last", "checkpoint")  # a run's own checkpoint: the run's folder names it


def weights_tag(weights: str, arch: str | None = None) -> str:
    """A folder name for ``weights``: ``random_<arch>``; a run directory's or its last checkpoint's folder name;
    ``<run>_<snapshot>`` for a kept snapshot (checkpoint_0019); else the file's name without its suffixes."""
    if weights == "random":
        return f"random_{arch}" if arch else "random"
    path = Path(weights)
    name = path.name
    while name.lower().endswith(_SUFFIXES):
        name = name[: name.rfind(".")]
    if path.is_dir():
        name = path.resolve().name
    elif name in _LAST:
        name = path.resolve().parent.name or name
    elif re.fullmatch(r"checkpoint_\d+", name):
        name = f"{path.resolve().parent.name}_{name}"
    return _UNSAFE.sub("_", name).strip("._")[:80] or "weights"


def _group(preset: str | None, fallback: str) -> str:
    """A folder name for a preset (a YAML file by its name without the suffix), else ``fallback``."""
    return _UNSAFE.sub("_", Path(preset).stem if preset else fallback).strip("._") or fallback


def data_tag(data: str | None) -> str | None:
    """A folder name for ``--data``: its folder's name (``~/digits``: ``digits``); None for the embedded data."""
    if data is None or data == "embedded":
        return None
    path = Path(data)
    name = (path.resolve().name if path.exists() else path.name) or "data"
    return _UNSAFE.sub("_", name).strip("._")[:40] or "data"


def evaluation_dir(preset: str | None, task: str, weights: str, arch: str | None = None,
                   data: str | None = None) -> str:
    """``runs/<preset, else the task>[_<data tag>]/<weights tag>``: where an evaluation writes when no directory is
    given; the data's folder is in the name wherever ``--data`` is given."""
    group = _group(preset, task)
    tag = data_tag(data)
    return f"runs/{group}{f'_{tag}' if tag else ''}/{weights_tag(weights, arch)}"


def pretrain_dir(preset: str | None) -> str:
    """``runs/<preset, else pretrain>``: where ``moco pretrain`` writes when no directory is given
    (``runs/embedded``, ``runs/moco_v2_200ep``)."""
    return f"runs/{_group(preset, 'pretrain')}"
