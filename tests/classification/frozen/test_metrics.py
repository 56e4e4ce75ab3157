"""classification/frozen/metrics.py against values worked out by hand, and the 11-point AP against a reference
written here the way the VOC 2007 devkit computes it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from classification.frozen.metrics import average_precision_11, map11, mean_per_class, top1


def test_top1_and_mean_per_class_by_hand() -> None:
    # images of class 0, 0, 0, 1; predicted 0, 0, 1, 1: top-1 3/4; per class 2/3 and 1/1, mean 5/6
    scores = torch.tensor([[2.0, 1.0], [3.0, 0.0], [0.0, 1.0], [0.5, 0.7]])
    labels = torch.tensor([0, 0, 0, 1])
    assert top1(scores, labels) == pytest.approx(75.0)
    assert mean_per_class(scores, labels) == pytest.approx(100 * (2 / 3 + 1) / 2)
    # a third class with no test image does not enter the mean (it is never predicted here either)
    padded = torch.cat([scores, torch.full((4, 1), -9.0)], 1)
    assert mean_per_class(padded, labels) == pytest.approx(100 * (2 / 3 + 1) / 2)


def test_11_point_ap_by_hand() -> None:
    # ranked +, -, +, -: recall .5 .5 1 1, precision 1 .5 2/3 .5; at t = 0 ... .5 the best precision is 1, at
    # t = .6 ... 1 it is 2/3: AP = (6 * 1 + 5 * 2/3) / 11
    s = torch.tensor([0.9, 0.8, 0.7, 0.1])
    assert average_precision_11(s, torch.tensor([1, 0, 1, 0])) == pytest.approx((6 + 5 * 2 / 3) / 11)
    # the same, with a difficult image (-1) ranked second: left out, the ranking is +, -, +
    assert average_precision_11(s, torch.tensor([1, -1, 0, 1])) == pytest.approx((6 + 5 * 2 / 3) / 11)
    # ranked -, +: recall 0 then 1 at precision 1/2: every point 1/2
    assert average_precision_11(torch.tensor([2.0, 1.0]), torch.tensor([0, 1])) == pytest.approx(0.5)
    # 10 positives ranked first out of 20: recall k/10 exactly at each point, precision 1 (no rounding loses 0.3)
    assert average_precision_11(torch.arange(20.0).flip(0), (torch.arange(20) < 10).long()) == pytest.approx(1.0)
    assert average_precision_11(s, torch.tensor([0, 0, -1, 0])) is None
    scores = torch.stack([s, s, torch.tensor([2.0, 1.0, 0.0, 0.0]), s], 1)
    labels = torch.tensor([[1, 1, 0, 0], [0, -1, 1, 0], [1, 0, 0, 0], [0, 1, 0, 0]])
    # classes: (6 + 10/3)/11, (6 + 10/3)/11 (difficult left out), ranked -,+,(-,-): 1/2, none (left out)
    assert map11(scores, labels) == pytest.approx(100 * (2 * (6 + 10 / 3) / 11 + 0.5) / 3)


def _devkit_ap(scores: np.ndarray, gt: np.ndarray) -> float:
    """VOCevalcls of the VOC 2007 devkit, transcribed: gt 1 / -1 / 0 (difficult), sorted by descending
    confidence, difficult ones dropped, then max precision at recall >= t for t = 0:0.1:1."""
    order = np.argsort(-scores, kind="stable")
    gt = gt[order]
    gt = gt[gt != 0]
    tp, fp = np.cumsum(gt > 0), np.cumsum(gt < 0)
    rec, prec = tp / np.sum(gt > 0), tp / (tp + fp)
    return float(np.mean([prec[rec >= t - 1e-12].max() if np.any(rec >= t - 1e-12) else 0.0
                          for t in np.arange(11) / 10]))


def test_11_point_ap_against_the_devkit_loop() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(5, 60))
        gt = rng.choice([1, -1, -1, 0], n)
        gt[0] = 1
        scores = rng.normal(size=n) + gt
        ours = average_precision_11(torch.from_numpy(scores), torch.from_numpy(np.where(gt < 0, 0, np.where(
            gt == 0, -1, 1))))
        assert ours == pytest.approx(_devkit_ap(scores, gt), abs=1e-12)
