"""probes/davis/propagate.py: DINO's frame sizes, the neighbourhood, one propagation step by hand and against a
reference written here the way the official code computes it (exp of the affinity, the window multiplied in, the
top k kept by threshold, normalised), and the upsampled prediction."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from probes.davis.propagate import frame_size, neighbourhood, one_hot, propagate, propagate_step, to_prediction


@pytest.mark.parametrize(("size", "stride", "expected"), [
    ((480, 854), 16, (480, 832)),  # DAVIS 480p, ViT-S/16: the long side down to a multiple of 64
    ((854, 480), 8, (832, 480)),  # portrait
    ((480, 854), 32, (480, 832)),  # a ResNet's last stage
    ((480, 854), 14, (476, 854)),  # a 14-px patch (DINOv2): both sides down to multiples of 14 (854 is one)
    ((480, 860), 14, (476, 854)),
    ((192, 320), 32, (192, 320)),  # the embedded videos
    ((192, 288), 32, (192, 256)),
])
def test_frame_size_is_dinos(size: tuple[int, int], stride: int, expected: tuple[int, int]) -> None:
    short = min(size) if stride != 14 else 480
    assert frame_size(*size, short_side=short, stride=stride) == expected


def test_the_neighbourhood_is_a_square_window() -> None:
    assert neighbourhood(1, 3, 1, torch.device("cpu")).int().tolist() == [[1, 1, 0], [1, 1, 1], [0, 1, 1]]
    window = neighbourhood(3, 3, 1, torch.device("cpu"))
    assert window[0].int().tolist() == [1, 1, 0, 1, 1, 0, 0, 0, 0]  # (0, 0): itself, right, below, diagonal
    assert window.all(1)[4]  # the centre sees all 9


def test_one_step_by_hand() -> None:
    # One source frame of two patches, features [1, 0] and [0, 1], labelled class 0 and class 1. The target's only
    # patch is [1, 0]: similarities 1 and 0.
    sources = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # (S=1, D=2, P=2): patch j is column j
    labels = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # (S=1, C=2, P=2)
    target = torch.tensor([[1.0], [0.0]])  # (D, P=1)
    step = {"sources": sources, "source_labels": labels, "window": None}
    # top 1: the label of the first patch alone
    assert propagate_step(target, topk=1, temperature=1.0, **step).flatten().tolist() == [1.0, 0.0]
    # top 2 at T 1: weights e^1 / (e + 1) and 1 / (e + 1)
    expected = [math.e / (math.e + 1), 1 / (math.e + 1)]
    assert propagate_step(target, topk=2, temperature=1.0, **step).flatten().tolist() == pytest.approx(expected)
    # a window that leaves the first patch out: the second's label, however similar the first
    window = torch.tensor([[False, True]])
    only = propagate_step(target, sources, labels, topk=2, temperature=1.0, window=window)
    assert only.flatten().tolist() == [0.0, 1.0]


def official_step(target: torch.Tensor, sources: torch.Tensor, source_labels: torch.Tensor, *, topk: int,
                  temperature: float, window: torch.Tensor) -> torch.Tensor:
    """The official step, as its code computes it: affinity exp(cos / T) of every source patch (rows) to every
    target patch (columns), times the window, each column's values below its k-th largest set to 0, columns
    normalised to sum 1, labels times affinity."""
    context, classes, patches = source_labels.shape
    affinity = torch.exp(torch.einsum("sdp,dq->spq", sources, target) / temperature)  # (S, P_source, P_target)
    affinity = affinity * window.T[None]  # window[target, source]
    affinity = affinity.reshape(context * patches, -1)
    kth = affinity.topk(topk, dim=0).values.min(0).values
    affinity = torch.where(affinity < kth, torch.zeros_like(affinity), affinity)
    affinity = affinity / affinity.sum(0, keepdim=True)
    return source_labels.permute(1, 0, 2).reshape(classes, -1) @ affinity


def test_a_step_matches_the_official_computation() -> None:
    g = torch.Generator().manual_seed(0)
    height, width, context, dim, classes = 4, 5, 3, 6, 3
    sources = F.normalize(torch.randn(context, dim, height * width, generator=g), dim=1)
    target = F.normalize(torch.randn(dim, height * width, generator=g), dim=0)
    labels = torch.softmax(torch.randn(context, classes, height * width, generator=g), dim=1)
    window = neighbourhood(height, width, 1, torch.device("cpu"))
    ours = propagate_step(target, sources, labels, topk=5, temperature=0.1, window=window)
    official = official_step(target, sources, labels, topk=5, temperature=0.1, window=window)
    assert torch.allclose(ours, official, atol=1e-5)


def test_propagation_keeps_the_first_frame_and_the_last_n() -> None:
    # Frames whose features equal the first's: every frame copies the first frame's labels, whatever the context.
    g = torch.Generator().manual_seed(1)
    feature = torch.randn(4, 2, 3, generator=g)
    first = one_hot(torch.tensor([[0, 1, 1], [2, 0, 1]]), 3)
    out = list(propagate([feature] * 5, first, context=2, topk=1, temperature=0.1, radius=1))
    assert len(out) == 4 and all(torch.allclose(o, first) for o in out)


def test_the_prediction_is_upsampled_then_resized() -> None:
    # Two patches side by side, class 0 on the left, class 1 on the right, stride 2: bilinear upsampling gives
    # class 0 [1, 0.75, 0.25, 0] and class 1 [0, 0.25, 0.75, 1] along a row: argmax [0, 0, 1, 1].
    soft = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])  # (C=2, h=1, w=2)
    assert to_prediction(soft, 2, (2, 4)).tolist() == [[0, 0, 1, 1], [0, 0, 1, 1]]
    # resized to the frame's own 8 px by pixel centres: each pixel doubled
    assert to_prediction(soft, 2, (1, 8)).tolist() == [[0, 0, 0, 0, 1, 1, 1, 1]]
    # each channel is rescaled to [0, 1] first: a faint object (at most 0.2) still wins where it is largest
    faint = torch.tensor([[[0.9, 0.8]], [[0.0, 0.2]]])
    assert to_prediction(faint, 1, (1, 2)).tolist() == [[0, 1]]
