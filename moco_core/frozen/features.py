"""Features of a frozen backbone over a dataset, computed once and cached on disk, keyed by what made them.

:func:`moco_core.run.features.extract_features` (the one feature pass) computes them: ``{tap: (N, D_tap) float32
on the CPU}`` and the labels, in the dataset's order, as a :class:`FeatureSet`.

:func:`cached_features` keeps them in a file named by the SHA-256 of their key, a plain dict saying what made
them (CLIP_benchmark's ``features_{train,val}.pt`` idea, with the key made explicit): the weights (their file's
SHA-256, or "random" with the arch and the seed that drew them), the transform (resize, crop, interpolation,
normalisation: :class:`FeatureTransform`), the dataset (root, split, a digest of its file list and labels:
:func:`samples_digest`), the taps and the precision. :func:`feature_key` builds that key. A changed key is another
file, never a stale read. Files are written atomically (a temporary file renamed into place), hold their key and
the SHA-256 of their payload, and are checked on every read: a truncated or altered file, or one whose key is not
the one asked for, is recomputed with a one-line warning, never trusted.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from moco_core.checkpoint import write_atomic
from moco_core.data.augment import IMAGENET_MEAN, IMAGENET_STD
from moco_core.errors import UserError, print_warning
from moco_core.model.backbone import BackboneInfo
from moco_core.run.features import FeatureSet
from moco_core.user_files import parse_json

# Bump when what extract_features computes for the same key changes (it is part of every key).
FEATURES_FORMAT = 1
_MAGIC = b"moco-features 1\n"
_HEADER_LIMIT = 1 << 20  # bytes of the JSON header line


@dataclass(frozen=True)
class FeatureTransform:
    """The deterministic view features are computed from: shorter side resized to ``resize`` (``interpolation``),
    centre crop ``crop_size``, tensor, normalised by ``mean`` / ``std``.

    The transfer protocol's (Kornblith et al., arXiv 1805.08974; SimCLR appendix B.8) is the default: bicubic to
    224, centre crop 224, ImageNet's statistics. The normalisation is set only by :func:`transform_for`, so that
    weights that expect other inputs (converted SimCLR weights take [0, 1]) are wired in one place."""

    resize: int = 224
    crop_size: int = 224
    interpolation: str = "bicubic"  # "bilinear" for ImageNet's evaluation views
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD

    def build(self) -> Callable[[Any], torch.Tensor]:
        """The torchvision transform (a PIL image in, a (3, crop, crop) tensor out)."""
        from torchvision import transforms as T

        mode = T.InterpolationMode(self.interpolation)
        return T.Compose([T.Resize(self.resize, interpolation=mode), T.CenterCrop(self.crop_size), T.ToTensor(),
                          T.Normalize(list(self.mean), list(self.std))])

    def record(self) -> dict[str, Any]:
        return {"resize": self.resize, "crop_size": self.crop_size, "interpolation": self.interpolation,
                "mean": list(self.mean), "std": list(self.std)}


def transform_for(info: BackboneInfo | None, *, resize: int = 224, crop_size: int = 224,
                  interpolation: str = "bicubic") -> FeatureTransform:
    """The view for ``info``'s weights: their input normalisation (``BackboneInfo.normalisation``, the weights'
    method's or what their file states: moco_core/model/weights/), else ImageNet's."""
    norm = info.normalisation if info is not None else None
    if isinstance(norm, dict) and "mean" in norm and "std" in norm:
        mean, std = tuple(float(v) for v in norm["mean"]), tuple(float(v) for v in norm["std"])
        return FeatureTransform(resize, crop_size, interpolation, mean, std)  # type: ignore[arg-type]
    return FeatureTransform(resize, crop_size, interpolation)


def weights_identity(info: BackboneInfo, seed: int | None = None) -> dict[str, Any]:
    """The key's ``weights``: the file's SHA-256, or for random init the arch and the seed that drew it."""
    if info.sha256:
        return {"sha256": info.sha256, "arch": info.arch}
    return {"random": True, "arch": info.arch, "seed": seed}


def samples_digest(root: str | os.PathLike[str], samples: Iterable[tuple[str, Any]]) -> str:
    """SHA-256 of a split's file list in order: each file's path relative to ``root``, its size and its label
    (a list for multi-label targets). It changes when a file is added, removed, reordered, relabelled or
    rewritten at another size."""
    digest = hashlib.sha256()
    for path, label in samples:
        try:
            size = os.stat(path).st_size
        except OSError:
            size = -1
        label = label.tolist() if isinstance(label, torch.Tensor) else label
        rel = os.path.relpath(path, root)
        digest.update(json.dumps([rel, size, label]).encode("utf-8", "surrogateescape") + b"\n")
    return digest.hexdigest()


class View(Protocol):
    """What a feature key records of the view features are computed from: :class:`FeatureTransform`, or the dense
    probes' whole-image resize (:class:`dense.features.DenseView`)."""

    def record(self) -> dict[str, Any]: ...


def feature_key(*, weights: dict[str, Any], transform: View, dataset: dict[str, Any],
                taps: Sequence[str], amp: bool, device: torch.device | str) -> dict[str, Any]:
    """The cache key of a feature set (see the module docstring). ``dataset``: at least ``root``, ``split`` and
    the ``files`` digest (:func:`samples_digest`). bf16 and fp32 features differ, so the precision is part of it."""
    precision = "bf16" if amp and torch.device(device).type == "cuda" else "fp32"
    return {"format": FEATURES_FORMAT, "weights": weights, "transform": transform.record(), "dataset": dataset,
            "taps": list(taps), "precision": precision}


def key_digest(key: dict[str, Any]) -> str:
    """SHA-256 of the key's canonical JSON (sorted keys): the cache file's name."""
    return hashlib.sha256(_canonical(key).encode()).hexdigest()


def _canonical(key: dict[str, Any]) -> str:
    return json.dumps(key, sort_keys=True, separators=(",", ":"), allow_nan=False)


def cache_path(cache_dir: Path, key: dict[str, Any]) -> Path:
    return Path(cache_dir) / f"features-{key_digest(key)[:32]}.pt"


def cached_features(cache_dir: str | os.PathLike[str], key: dict[str, Any],
                    compute: Callable[[], FeatureSet], *, count: int | None = None) -> FeatureSet:
    """The feature set of ``key`` from ``cache_dir``, or ``compute()``'d and written there (atomically). ``count``:
    the images of the split, the rows a cached file must hold (:func:`read_feature_file`)."""
    path = cache_path(Path(cache_dir), key)
    if path.exists():
        try:
            found = read_feature_file(path, key, count)
            found.key, found.cached, found.path = key, True, path
            return found
        except _Unusable as err:
            print_warning(f"feature cache {path}: {err}; recomputing it")
    made = compute()
    write_feature_file(path, key, made)
    made.key, made.path = key, path
    return made


class _Unusable(Exception):
    """A cache file that must not be trusted (the message says why)."""


def write_feature_file(path: Path, key: dict[str, Any], features: FeatureSet) -> None:
    """``path``: the magic line, a JSON header line (the key, the payload's length and SHA-256), then the payload
    (torch.save of the tensors), written through :func:`moco_core.checkpoint.write_atomic`."""
    buffer = io.BytesIO()
    torch.save({"features": features.features, "labels": features.labels}, buffer)
    payload = buffer.getvalue()
    header = json.dumps({"key": key, "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()},
                        sort_keys=True, allow_nan=False).encode() + b"\n"

    def write(f: Any) -> None:
        f.write(_MAGIC)
        f.write(header)
        f.write(payload)

    write_atomic(path, write, what="feature cache")


def read_feature_file(path: Path, key: dict[str, Any], count: int | None = None) -> FeatureSet:
    """The features in ``path``, checked: its key must be ``key``, its payload whole (length and SHA-256), its
    tensors of the shapes and types extraction makes, ``count`` rows where given (:func:`_check_shapes`); raises
    :class:`_Unusable` otherwise."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would wait for ever, a folder is no file
            raise _Unusable("not a regular file")
        with open(path, "rb") as f:
            if f.read(len(_MAGIC)) != _MAGIC:
                raise _Unusable("not a feature cache file of this version")
            line = f.readline(_HEADER_LIMIT)
            try:  # numbers past 64 bits or a double, nesting too deep: damaged, as malformed JSON is
                header = parse_json(line, what="")
            except UserError:
                raise _Unusable("its header is damaged") from None
            size = os.fstat(f.fileno()).st_size
            if not isinstance(header, dict) or not isinstance(header.get("bytes"), int) \
                    or isinstance(header["bytes"], bool) or not 0 <= header["bytes"] <= size:
                raise _Unusable("its header is damaged")
            try:
                same = _canonical(header.get("key", {})) == _canonical(key)
            except (TypeError, ValueError, RecursionError):  # NaN or Infinity in the key: none of ours
                raise _Unusable("its header is damaged") from None
            if not same:
                raise _Unusable("it holds the features of another key")
            payload = f.read(header["bytes"] + 1)
    except OSError as err:
        raise _Unusable(f"cannot be read ({err.strerror or err})") from None
    if len(payload) != header["bytes"] or hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise _Unusable("its content does not match its checksum (truncated or altered)")
    try:
        data = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
        features, labels = data["features"], data["labels"]
    except Exception as err:  # the checksum matched, so only a file written by other code gets here
        raise _Unusable(f"unreadable ({type(err).__name__})") from None
    if not (isinstance(features, dict) and list(features) == list(key.get("taps", features))):
        raise _Unusable("its tensors are not the ones its key names")
    _check_shapes(features, labels, count)
    return FeatureSet(features, labels)


def _check_shapes(features: dict[str, Any], labels: Any, count: int | None) -> None:
    """What the solvers index without checking, checked here (:class:`_Unusable` otherwise), whatever the values:
    labels (N,) or (N, C) int64, every tap's features (N, D) float32 with D >= 1, N the ``count`` of images the
    split holds now; dense and contiguous (an expanded tensor's few bytes can claim 10^12 elements)."""
    def shown(value: Any) -> str:
        if not isinstance(value, torch.Tensor):
            return type(value).__name__
        return f"{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"

    rows = count if count is not None else labels.shape[0] if isinstance(labels, torch.Tensor) and labels.dim() else 0
    if not (_dense(labels) and labels.dtype == torch.int64 and labels.dim() in (1, 2) and labels.shape[0] == rows):
        raise _Unusable(f"its labels are {shown(labels)}, not ({rows},) or ({rows}, C) int64")
    for tap, value in features.items():
        if not (_dense(value) and value.dtype == torch.float32 and value.dim() == 2 and value.shape[0] == rows
                and value.shape[1] >= 1):
            raise _Unusable(f"its {tap} features are {shown(value)}, not ({rows}, D) float32")


def _dense(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.layout == torch.strided and value.is_contiguous()
