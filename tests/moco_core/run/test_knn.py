"""Weighted kNN against a hand-worked example."""

from __future__ import annotations

import math

import pytest
import torch

from moco_core.run.knn import knn_scores, topk_accuracy


def test_knn_scores_by_hand() -> None:
    # Bank on the unit circle: class 0 at 0 and 60 degrees, class 1 at 90 degrees. Query at 0 degrees.
    angles = torch.tensor([0.0, math.pi / 3, math.pi / 2])
    bank = torch.stack([angles.cos(), angles.sin()], dim=1)
    labels = torch.tensor([0, 0, 1])
    query = torch.tensor([[1.0, 0.0]])
    t = 0.5
    scores = knn_scores(query, bank, labels, 2, k=3, temperature=t)
    # cosines 1, 0.5, 0 -> class 0: e^(1/.5) + e^(.5/.5) = e^2 + e; class 1: e^0 = 1
    assert scores[0].tolist() == pytest.approx([math.e**2 + math.e, 1.0])
    # k = 2 keeps only the two nearest (both class 0)
    assert knn_scores(query, bank, labels, 2, k=2, temperature=t)[0].tolist() == pytest.approx([math.e**2 + math.e, 0])
    # Chunking does not change the result
    queries = torch.nn.functional.normalize(torch.randn(7, 2), dim=1)
    assert torch.allclose(knn_scores(queries, bank, labels, 2, k=3, chunk=2), knn_scores(queries, bank, labels, 2, k=3))


def test_topk_accuracy() -> None:
    scores = torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.15, 0.05], [0.2, 0.3, 0.5]])
    labels = torch.tensor([1, 1, 0])
    acc = topk_accuracy(scores, labels, (1, 2, 5))
    assert acc["top1"] == pytest.approx(100 / 3)
    assert acc["top2"] == pytest.approx(200 / 3)
    assert acc["top5"] == pytest.approx(100.0)  # k above the class count counts every class
