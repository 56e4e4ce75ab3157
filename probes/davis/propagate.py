"""Label propagation through a video on frozen patch features (DINO, arXiv 2104.14294, section 4.2; after Jabri et
al., arXiv 2006.14613), as facebookresearch/dino's ``eval_video_segmentation.py`` runs it (read to learn):

- each frame is resized so that its shorter side is ``short_side`` (480) and its longer side is rounded down to a
  multiple of 64 (:func:`frame_size`), and read as a grid of patch features of ``stride`` pixels;
- the first frame's annotation, resized by nearest neighbour to the grid, is one-hot over background and objects;
- every later frame's soft labels are a weighted vote of the first frame's labels and the ``context`` (7) previous
  frames' predicted soft labels: each target patch takes the ``topk`` (5) source patches of highest cosine
  similarity among those within ``radius`` (12) patches of it in both directions, weighted by
  ``exp(similarity / temperature)`` (0.1) normalised over the chosen ones (:func:`propagate_step`);
- the soft labels are upsampled bilinearly by ``stride``, each channel rescaled to [0, 1], and the argmax,
  resized to the frame's own size by nearest neighbour, is the prediction (:func:`to_prediction`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
import torch.nn.functional as F

LONG_SIDE_MULTIPLE = 64  # DINO's read_frame rounds the longer side down to a multiple of 64
TARGET_CHUNK = 1024  # target patches a similarity block holds: (chunk, context * patches) floats at a time


def frame_size(height: int, width: int, *, short_side: int, stride: int) -> tuple[int, int]:
    """(H', W') a frame of ``height`` x ``width`` is read at: the shorter side ``short_side``, the longer scaled
    with it and rounded down to a multiple of 64; both then rounded down to a multiple of ``stride``.

    # Deviation from the official code: the rounding to ``stride``, a no-op for DINO's ViTs (8, 16) and the ResNet
    # stages (4..32) at 480 px, lets a backbone whose stride does not divide 64 or the short side (a 14-px patch)
    # read the frame on a whole grid; the official code assumes it does."""
    multiple = LONG_SIDE_MULTIPLE if LONG_SIDE_MULTIPLE % stride == 0 else stride
    if height > width:
        new_w, new_h = short_side, int(short_side * height / width) // multiple * multiple
    else:
        new_h, new_w = short_side, int(short_side * width / height) // multiple * multiple
    return max(stride, new_h // stride * stride), max(stride, new_w // stride * stride)


def neighbourhood(height: int, width: int, radius: int, device: torch.device) -> torch.Tensor:
    """(h*w, h*w) bool: source patch j lies within ``radius`` rows and columns of target patch i (a square window,
    the official ``restrict_neighborhood``)."""
    rows = torch.arange(height, device=device).repeat_interleave(width)
    cols = torch.arange(width, device=device).repeat(height)
    return ((rows[:, None] - rows[None, :]).abs() <= radius) & ((cols[:, None] - cols[None, :]).abs() <= radius)


def one_hot(labels: torch.Tensor, classes: int) -> torch.Tensor:
    """(h, w) int64 ids in [0, classes) -> (classes, h, w) float one-hot."""
    return F.one_hot(labels, classes).permute(2, 0, 1).to(torch.float32)


def propagate_step(target: torch.Tensor, sources: torch.Tensor, source_labels: torch.Tensor, *, topk: int,
                   temperature: float, window: torch.Tensor | None) -> torch.Tensor:
    """Soft labels (C, Q) of a target frame: ``target`` (D, Q) and ``sources`` (S, D, P) L2-normalised patch
    features, ``source_labels`` (S, C, P), ``window`` (Q, P) bool (None: every source patch is a candidate).

    Each target patch keeps its ``topk`` most similar candidate patches over all S source frames and averages
    their labels weighted by softmax(similarity / temperature) over those k: the official exp-then-normalise."""
    context, classes, patches = source_labels.shape
    keys = sources.permute(0, 2, 1).reshape(context * patches, -1)  # (S*P, D)
    labels = source_labels.permute(1, 0, 2).reshape(classes, context * patches)  # (C, S*P)
    targets = target.shape[1]
    out = torch.empty(classes, targets, device=target.device, dtype=labels.dtype)
    k = min(topk, context * patches)
    for start in range(0, targets, TARGET_CHUNK):
        stop = min(start + TARGET_CHUNK, targets)
        similarity = target[:, start:stop].T @ keys.T  # (chunk, S*P) cosine
        if window is not None:  # a patch outside the window is never chosen: weight exp(-inf) = 0
            allowed = window[start:stop].repeat(1, context)  # (chunk, S*P)
            similarity = similarity.masked_fill(~allowed, float("-inf"))
        values, index = similarity.topk(k, dim=1)  # (chunk, k)
        weights = torch.softmax(values / temperature, dim=1)  # (chunk, k)
        out[:, start:stop] = (labels[:, index] * weights[None]).sum(-1)  # (C, chunk)
    return out


def propagate(features: Iterable[torch.Tensor], first_labels: torch.Tensor, *, context: int, topk: int,
              temperature: float, radius: int) -> Iterator[torch.Tensor]:
    """The soft labels (C, h, w) of every frame after the first: ``features`` yields each frame's (D, h, w) patch
    features, the first frame's first; ``first_labels`` (C, h, w) is the first frame's one-hot annotation.
    ``radius`` 0 or less: no window (every patch of the sources is a candidate)."""
    frames = iter(features)
    first = F.normalize(next(frames).flatten(1), dim=0)  # (D, P)
    classes, height, width = first_labels.shape
    first_soft = first_labels.reshape(classes, -1)
    window = neighbourhood(height, width, radius, first.device) if radius > 0 else None
    recent: list[tuple[torch.Tensor, torch.Tensor]] = []  # the `context` previous frames' (features, soft labels)
    for feature in frames:
        target = F.normalize(feature.flatten(1), dim=0)
        sources = torch.stack([first, *(f for f, _ in recent)])  # (S, D, P)
        labels = torch.stack([first_soft, *(s for _, s in recent)])  # (S, C, P)
        soft = propagate_step(target, sources, labels, topk=topk, temperature=temperature, window=window)
        recent = [*recent, (target, soft)][-context:] if context > 0 else []
        yield soft.reshape(classes, height, width)


def to_prediction(soft: torch.Tensor, stride: int, size: tuple[int, int]) -> torch.Tensor:
    """(H, W) int64 ids of a frame of ``size`` from its soft labels (C, h, w): upsampled bilinearly by ``stride``,
    each channel whose maximum is above 0 rescaled to [0, 1] (the official ``norm_mask``), argmax, then resized
    to ``size`` by nearest neighbour at pixel centres (PIL's NEAREST, which the official code resizes with)."""
    up = F.interpolate(soft[None], scale_factor=stride, mode="bilinear", align_corners=False)[0]  # (C, h*s, w*s)
    low = up.flatten(1).min(1).values[:, None, None]
    high = up.flatten(1).max(1).values[:, None, None]
    scaled = torch.where(high > 0, (up - low) / (high - low).clamp_min(torch.finfo(up.dtype).tiny), up)
    ids = scaled.argmax(0)
    return F.interpolate(ids[None, None].to(torch.float32), size=size, mode="nearest-exact")[0, 0].long()
