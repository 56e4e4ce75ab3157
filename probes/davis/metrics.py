"""DAVIS's scores of a video object segmentation: J (region similarity), F (boundary accuracy) and their mean.

Computed as davisvideochallenge/davis2017-evaluation computes them for the semi-supervised task (read to learn;
written here in torch, no OpenCV or scikit-image):

- **J** of one object in one frame: the IoU of the predicted and annotated masks; 1 when both are empty.
- **F**: the F-measure of the two masks' boundaries. A boundary pixel is one whose value differs from its right,
  lower or lower-right neighbour (the last row compares to the right only, the last column downwards only, the
  corner never: davis2017-evaluation's ``_seg2bmap``); a predicted boundary pixel is matched when an annotated one
  lies within a disk of radius ``ceil(0.008 * image diagonal)`` pixels (8 px at 854 x 480), and the reverse for
  recall. An empty boundary on one side only gives F 0; on both, F 1.
- Per object, the mean over the frames between the first (given) and the last (left out, as the official code
  does); J-Mean and F-Mean are the means over every object of every video; J&F the mean of the two.

Annotated masks hold object ids 1..n on 0; 255 (void) counts as background, as the official reader sets it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

BOUNDARY_TOLERANCE = 0.008  # of the image diagonal (davis2017-evaluation's bound_th)
VOID = 255


def region_similarity(annotated: torch.Tensor, predicted: torch.Tensor) -> float:
    """J: IoU of two (H, W) bool masks; 1 when both are empty."""
    union = int((annotated | predicted).sum())
    return 1.0 if union == 0 else int((annotated & predicted).sum()) / union


def boundary_map(mask: torch.Tensor) -> torch.Tensor:
    """(H, W) bool: the pixels of ``mask`` (bool) whose value differs from the right, lower or lower-right
    neighbour's (a neighbour past the edge reads False; the last row and column are compared along the edge)."""
    right, down, diagonal = (torch.zeros_like(mask) for _ in range(3))
    right[:, :-1], down[:-1, :], diagonal[:-1, :-1] = mask[:, 1:], mask[1:, :], mask[1:, 1:]
    edges = (mask ^ right) | (mask ^ down) | (mask ^ diagonal)
    edges[-1, :] = mask[-1, :] ^ right[-1, :]
    edges[:, -1] = mask[:, -1] ^ down[:, -1]
    edges[-1, -1] = False
    return edges


def disk(radius: int) -> torch.Tensor:
    """(2r+1, 2r+1) bool: the offsets (dy, dx) with dy^2 + dx^2 <= r^2 (scikit-image's ``disk``)."""
    offsets = torch.arange(-radius, radius + 1)
    return offsets[:, None] ** 2 + offsets[None, :] ** 2 <= radius**2


def dilated(boundary: torch.Tensor, radius: int) -> torch.Tensor:
    """``boundary`` (H, W) bool grown by :func:`disk` (radius): a pixel is set when a set pixel lies within it.

    The disk is the union of its rows (row dy reaches ``|dx| <= w(dy)``), so the dilation is, for each dy, a
    running OR of width ``2 w(dy) + 1`` along the rows (from one cumulative sum), moved dy rows: a few passes over
    the image, not a (2r+1)^2 convolution (7 s a 480p frame on one CPU thread)."""
    height, width = boundary.shape
    counts = F.pad(boundary.to(torch.int32).cumsum(1), (1, 0))  # (H, W+1): counts[:, x] = set pixels left of x
    reach = disk(radius).sum(1) // 2  # (2r+1,): w(dy) for dy = -r .. r
    grown = torch.zeros_like(boundary)
    rows: dict[int, torch.Tensor] = {}
    for dy in range(-radius, radius + 1):
        w = int(reach[dy + radius])
        if w not in rows:  # any set pixel in columns x-w .. x+w: counts[x+w+1] > counts[x-w], both clamped
            ends = torch.cat([counts[:, :1].expand(-1, w), counts, counts[:, -1:].expand(-1, w)], 1)
            rows[w] = ends[:, 2 * w + 1:2 * w + 1 + width] > ends[:, :width]
        grown[max(0, -dy):height - max(0, dy)] |= rows[w][max(0, dy):height - max(0, -dy)]
    return grown


def tolerance(height: int, width: int, fraction: float = BOUNDARY_TOLERANCE) -> int:
    """The match radius in pixels for an image of ``height`` x ``width``: ``ceil(fraction * diagonal)``."""
    return math.ceil(fraction * math.hypot(height, width))


def boundary_f(annotated: torch.Tensor, predicted: torch.Tensor, fraction: float = BOUNDARY_TOLERANCE) -> float:
    """F: the boundary F-measure of two (H, W) bool masks (see the module docstring)."""
    radius = tolerance(*annotated.shape, fraction)
    found, truth = boundary_map(predicted), boundary_map(annotated)
    n_found, n_truth = int(found.sum()), int(truth.sum())
    if n_found == 0 or n_truth == 0:
        return 1.0 if n_found == n_truth else 0.0
    precision = int((found & dilated(truth, radius)).sum()) / n_found
    recall = int((truth & dilated(found, radius)).sum()) / n_truth
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def video_scores(annotated: torch.Tensor, predicted: torch.Tensor, objects: int) -> list[tuple[float, float]]:
    """(J mean, F mean) of each object 1..``objects`` of a video: ``annotated`` and ``predicted`` (T, H, W) object
    ids; the frames scored are 1..T-2 (the first is given, the last left out as davis2017-evaluation does)."""
    annotated = torch.where(annotated == VOID, 0, annotated)
    frames = range(1, annotated.shape[0] - 1)
    scores = []
    for obj in range(1, objects + 1):
        j = [region_similarity(annotated[t] == obj, predicted[t] == obj) for t in frames]
        f = [boundary_f(annotated[t] == obj, predicted[t] == obj) for t in frames]
        scores.append((sum(j) / len(j), sum(f) / len(f)))
    return scores


def summary(scores: list[tuple[float, float]]) -> dict[str, float]:
    """J&F-Mean, J-Mean and F-Mean over every object (percent, as DINO's Table reports them)."""
    j = 100 * sum(s[0] for s in scores) / len(scores)
    f = 100 * sum(s[1] for s in scores) / len(scores)
    return {"J&F_mean": (j + f) / 2, "J_mean": j, "F_mean": f}
