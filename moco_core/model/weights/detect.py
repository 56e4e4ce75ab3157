"""The entry point: which backbone a weights file holds, trained by which method, read from which encoder, to be fed
which input normalisation. Detected from the file's keys and shapes, never guessed from its name.

Each family's reader (one module each: :mod:`moco`, :mod:`dino`, :mod:`dinov2`, :mod:`barlow`, :mod:`simclr`,
:mod:`swav`, :mod:`mae`, :mod:`lightning`, :mod:`hub` for safetensors, :mod:`plain` for a library's plain names)
recognises its layout or passes. A file states its method by a field (ours), or by a layout only that method's
code writes (DINO's full checkpoint, DINOv2's ViT, Barlow Twins' checkpoint.pth, SimCLR v2's converter, MAE with
its decoder). A layout several methods share (a torchvision ResNet state dict: supervised, DINO, Barlow Twins,
BYOL...) is refused with one line naming the candidates, unless ``weights_format`` (``--weights-format``) names
the method; a name that contradicts what the file states is refused too.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from moco_core import checkpoint, smoke
from moco_core.errors import print_warning
from moco_core.model.weights import files, readers, resnet_names, vit_names
from moco_core.model.weights.formats import IMAGENET, METHODS, Normalisation, UnknownFormatError, method
from moco_core.model.weights.layout import Found

FILE, OPTION = "file", "--weights-format"  # who named the method: the file itself, or the user


class AmbiguousWeightsError(checkpoint.CheckpointError):
    """A layout several methods' weights come in, and no --weights-format to say which."""


@dataclass
class Weights:
    """A backbone read from a file, and what it is."""

    path: Path
    found: Found
    method: str
    stated_by: str  # FILE or OPTION
    encoder: str
    normalisation: Normalisation
    arch: str
    given: str = ""  # the source as the user gave it (a run directory, a folder), for messages

    @property
    def state(self) -> dict[str, torch.Tensor]:
        return self.found.state

    @functools.cached_property
    def sha256(self) -> str:
        """The file's SHA-256, read when a record asks for it (a sanity check's second read needs none)."""
        return file_sha256(self.path)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def resolve_path(source: str | Path) -> Path:
    """A run directory means its last checkpoint; a Hugging Face snapshot folder its ``model.safetensors``."""
    path = Path(source)
    if path.is_dir() and not (path / checkpoint.LAST).is_file() and (path / "model.safetensors").is_file():
        return path / "model.safetensors"
    return checkpoint.resolve(path) if path.is_dir() else path


def find(path: Path) -> Found:
    """The layout ``path`` holds (:class:`Found`): the one reader of :data:`~readers.READERS` that claims it."""
    content = files.read_file(path)
    try:
        found = claim(content)
    except checkpoint.CheckpointError as err:  # a reader's refusal of what the file holds: the file named
        raise checkpoint.CheckpointError(str(err) if str(err).startswith(str(path)) else f"{path}: {err}") from None
    except (IndexError, RuntimeError, ValueError, TypeError) as err:  # tensors of shapes no file of its layout has
        first = " ".join(str(err).split())[:200] or type(err).__name__
        raise checkpoint.CheckpointError(f"{path}: its tensors do not have the shapes of the layout its names say "
                                         f"({type(err).__name__}: {first})") from None
    if found is None and content.kind == readers.PICKLE and isinstance(content.obj.get("state_dict"), dict) and any(
            isinstance(k, str) and k.startswith("module.") for k in content.obj["state_dict"]):
        raise checkpoint.CheckpointError(f"{path}: has a state_dict without module.encoder_q.* (v1/v2) or "
                                         f"module.base_encoder.* (v3) keys; not a MoCo pretraining checkpoint, "
                                         f"nor another layout read here")
    if found is None:
        raise checkpoint.CheckpointError(f"{path}: not a weights file of a layout read here ({readers.files_read()})"
                                         f"; found {_describe(content)}")
    return found


def claims(content: files.WeightsFile) -> list[tuple[readers.Reader, Found]]:
    """What each reader of the file's kind makes of it, in the table's order: every method's reader that
    recognises it, or, where none does, the fallback's."""
    own = [r for r in readers.READERS if r.kind == content.kind]
    found = [(r, f) for r in own if not r.fallback for f in [r.read(content)] if f is not None]
    return found or [(r, f) for r in own if r.fallback for f in [r.read(content)] if f is not None]


def claim(content: files.WeightsFile) -> Found | None:
    """The one layout the file is claimed as; a file two method's readers claim is refused: which network it holds
    would be the order of the readers'."""
    found = claims(content)
    if len(found) > 1:
        raise checkpoint.CheckpointError(f"{content.path}: holds two layouts, {found[0][1].description} and "
                                         f"{found[1][1].description}: which network to read is not clear; save "
                                         f"the one to evaluate alone")
    return found[0][1] if found else None


def _describe(content: files.WeightsFile) -> str:
    obj = content.obj
    keys = list(obj)[:4]
    hint = " (a detectron2 model?)" if "model" in obj or "__author__" in obj else ""
    return f"a dict with keys {', '.join(map(str, keys))}{'...' if len(obj) > 4 else ''}{hint}"


def read_weights(source: str | Path, weights_format: str | None = None) -> Weights:
    """The backbone of ``source`` (a file, a run directory, a Hugging Face snapshot folder) and what it is.

    ``weights_format``: the method that trained it, where the file does not say (--weights-format). Weights
    holding NaN or inf (a run that diverged after its last good checkpoint, a damaged file) are refused: every
    evaluation of them would be noise (a kNN of NaN features scored 50% on two classes)."""
    path = resolve_path(source)
    if weights_format is not None:
        try:
            method(weights_format)
        except UnknownFormatError as err:
            raise checkpoint.CheckpointError(f"--weights-format: {err}") from None
    found = find(path)
    broken = [key for key, value in found.state.items()
              if value.is_floating_point() and not torch.isfinite(value).all()]
    if broken:
        raise checkpoint.CheckpointError(f"{path}: {len(broken)} of its {len(found.state)} backbone tensors hold NaN "
                                         f"or inf ({', '.join(broken[:3])}{', ...' if len(broken) > 3 else ''}); "
                                         f"nothing can be evaluated from them")
    name, stated_by = _method(found, weights_format, path)
    if found.vit is not None and stated_by == OPTION and name in ("mocov3", "dinov2"):
        # a plain ViT named: MoCo v3's heads (ViT-S: 12) and fixed position embedding; DINOv2's resampled one
        v3 = name == "mocov3"
        found = dataclasses.replace(found, vit=vit_names.vit_spec(
            found.state, heads=vit_names.mocov3_heads(found.state) if v3 else found.vit.num_heads,
            norm_eps=found.vit.norm_eps, dynamic=not v3, fixed_position=v3))
    known = METHODS.get(name)
    encoder = found.encoder or (known.encoder if known else "backbone")
    normalisation = found.normalisation or (known.normalisation if known else IMAGENET)
    arch = found.vit.arch if found.vit is not None else _resnet_arch(found, path)
    return Weights(path, found, name, stated_by, encoder, normalisation, arch, str(source))


def _resnet_arch(found: Found, path: Path) -> str:
    if not resnet_names.is_resnet(found.state):
        raise checkpoint.CheckpointError(f"{path}: {found.description} holds no ResNet or ViT backbone (keys "
                                         f"{', '.join(list(found.state)[:4])})")
    try:
        return resnet_names.infer_arch(found.state)
    except checkpoint.CheckpointError as err:
        raise checkpoint.CheckpointError(f"{path}: {err}") from None


def _method(found: Found, weights_format: str | None, path: Path) -> tuple[str, str]:
    """(the method, who named it); one line when the file does not say and nobody named it, or when the name
    contradicts the file."""
    family = "vit" if found.vit is not None else "resnet"
    if found.method is not None:
        if weights_format is not None and weights_format != found.method:
            raise checkpoint.CheckpointError(
                f"{path}: {found.description} states its method, {found.method}; --weights-format {weights_format} "
                f"contradicts it (leave the option out for this file)")
        return found.method, FILE
    candidates = [m for m in found.candidates if family in METHODS[m].families] or list(found.candidates)
    if weights_format is None:
        raise AmbiguousWeightsError(
            f"{path}: {found.description} does not say which method trained it: it could be "
            f"{', '.join(candidates)}; say which with --weights-format (one of those)")
    allowed = found.allowed or tuple(m for m in METHODS if family in METHODS[m].families)
    if weights_format not in allowed:
        why = (f"{weights_format}'s weights are no {family}s" if family not in METHODS[weights_format].families
               else f"that layout is written for {', '.join(allowed)} only")
        raise checkpoint.CheckpointError(f"{path}: --weights-format {weights_format} does not fit "
                                         f"{found.description}: {why}")
    return weights_format, OPTION


def pretrain_facts(weights: Weights) -> dict[str, Any]:
    """The record's ``backbone.pretrain``: the method and who named it, and what the file says of its training
    (:func:`plain_data`: a pickle may hold anything where a number is expected, and 100 bytes of shared lists
    unfold to billions of values); a checkpoint of ours from before checkpoints said smoke is a smoke run's by its
    run.json. What is cut to fit FACT_VALUES is said, on stderr and in the record (``truncated``)."""
    room = [FACT_VALUES]
    facts = {k: plain_data(v, room=room) for k, v in weights.found.facts.items() if k != "method"}
    if room[0] < 0:
        facts["truncated"] = (f"what {weights.path.name} says of its training holds more than {FACT_VALUES} values "
                              f"(a shared list counted each time it is reached): the first {FACT_VALUES} are kept")
        print_warning(f"{weights.path}: {facts['truncated']}")
    if facts.get("smoke") is False and smoke.recorded(weights.path.parent):  # ours from before the field
        facts["smoke"] = True
    return {"method": weights.method, "stated_by": weights.stated_by, **facts}


FACT_DEPTH = 32  # nesting kept of a checkpoint's pickled config (ours is 3 deep)
FACT_VALUES = 10_000  # values kept of it, each reached one counted (ours holds about 150)


def plain_data(value: Any, depth: int = 0, *, room: list[int] | None = None) -> Any:
    """``value`` as JSON that every reader of a record takes (moco_core.user_files.parse_json): an integer past
    64 bits (JSON takes it, Python's int() and the report do not), a NaN or infinite float, or nesting past
    FACT_DEPTH become None; a tensor or any other object its type's name. What a checkpoint says of its training
    is kept as far as it is data. ``room``: how many more values may be copied, counted down here (a list or dict
    reached twice counts twice: the copy unfolds it); once it is below zero, lists and dicts end where it ran out."""
    if room is not None:
        room[0] -= 1
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if -(1 << 63) <= value < 1 << 63 else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth >= FACT_DEPTH:
        return None
    if isinstance(value, dict):
        return {_plain_key(k): plain_data(v, depth + 1, room=room)
                for k, v in itertools.takewhile(lambda _: room is None or room[0] >= 0, value.items())}
    if isinstance(value, (list, tuple)):
        return [plain_data(v, depth + 1, room=room)
                for v in itertools.takewhile(lambda _: room is None or room[0] >= 0, value)]
    return type(value).__name__


def _plain_key(key: Any) -> str:
    plain = plain_data(key, FACT_DEPTH)  # a scalar, or None for an int past 64 bits, or a type's name
    return key if isinstance(key, str) else str(plain) if plain is not None else type(key).__name__
